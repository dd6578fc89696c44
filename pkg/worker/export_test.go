package worker

// CheckpointName is the effect name of a batch's group of items (the test of a killed
// batch reads which groups the killed process recorded done).
func CheckpointName(batchName string, index int, ids []string) string {
	return (&batch{name: batchName}).chunkName(index, ids)
}
