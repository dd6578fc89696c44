// Package queue carries runs from the ingress to the workers over Google Cloud Pub/Sub
// (cloud.google.com/go/pubsub/v2): the publisher the ingress waits on before it answers,
// the subscriber and push handler the workers receive from, the message format both
// share, and an in-process Pub/Sub server (pstest) for the embedded mode and fast tests.
//
// Delivery is at least once. A message carries the run's identity; the ledger decides
// whether the run still needs work, so duplicates and redeliveries are harmless.
package queue
