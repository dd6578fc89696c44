package redisledger

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
)

// micros is a duration in microseconds, as the scripts take it.
func micros(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }

// timeArg is a time as the scripts take it: microseconds since the epoch, "" for zero.
func timeArg(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(t.UnixMicro(), 10)
}

func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	return time.UnixMicro(n).UTC(), nil
}

// fields turns a flat HGETALL answer into a map.
func fields(v any) (map[string]string, error) {
	list, ok := v.([]any)
	if !ok {
		if m, ok := v.(map[any]any); ok { // RESP3
			out := make(map[string]string, len(m))
			for k, val := range m {
				out[fmt.Sprint(k)] = fmt.Sprint(val)
			}
			return out, nil
		}
		return nil, fmt.Errorf("a record is a %T, not a list of fields", v)
	}
	if len(list)%2 != 0 {
		return nil, fmt.Errorf("a record has %d items, not pairs", len(list))
	}
	out := make(map[string]string, len(list)/2)
	for i := 0; i < len(list); i += 2 {
		k, _ := list[i].(string)
		val, _ := list[i+1].(string)
		out[k] = val
	}
	return out, nil
}

// decoder collects the first error of a record's fields.
type decoder struct {
	m   map[string]string
	err error
}

func (d *decoder) time(k string) time.Time {
	t, err := parseTime(d.m[k])
	if err != nil && d.err == nil {
		d.err = fmt.Errorf("field %s: %w", k, err)
	}
	return t
}

func (d *decoder) int(k string) int64 {
	s := d.m[k]
	if s == "" {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil && d.err == nil {
		d.err = fmt.Errorf("field %s: %w", k, err)
	}
	return n
}

// decodeRun returns the run a record holds, nil for an empty record.
func decodeRun(m map[string]string) (*ledger.Run, error) {
	if len(m) == 0 {
		return nil, nil
	}
	d := decoder{m: m}
	r := &ledger.Run{
		ID: m["id"], Namespace: m["namespace"], Job: m["job"], Key: m["key"],
		ScheduleTime: d.time("schedule_time"), PayloadHash: m["payload_hash"],
		Status: ledger.Status(m["status"]), Attempt: d.int("attempt"), AttemptID: m["attempt_id"],
		Deadline: d.time("deadline"), NotBefore: d.time("not_before"), AttemptsMade: d.int("attempts_made"),
		LastError: m["last_error"], CreatedAt: d.time("created_at"), UpdatedAt: d.time("updated_at"),
		CompletedAt: d.time("completed_at"), ExpireAt: d.time("expire_at"),
	}
	if p := m["payload"]; p != "" {
		r.Payload = []byte(p)
	}
	if res := m["result"]; res != "" {
		r.Result = []byte(res)
	}
	if pr := m["progress"]; pr != "" {
		r.Progress = []byte(pr)
	}
	if d.err == nil && !r.Status.Valid() {
		d.err = fmt.Errorf("status %q is not a run status", r.Status)
	}
	if d.err != nil {
		return nil, fmt.Errorf("redisledger: run %s: %w", m["id"], d.err)
	}
	return r, nil
}

// decodeEffect returns the effect a record holds, nil for an empty record.
func decodeEffect(m map[string]string) (*ledger.Effect, error) {
	if len(m) == 0 {
		return nil, nil
	}
	d := decoder{m: m}
	e := &ledger.Effect{
		Key: m["key"], RunID: m["run_id"], Name: m["name"], Status: ledger.EffectStatus(m["status"]),
		Attempt: d.int("attempt"), Ref: m["ref"], CreatedAt: d.time("created_at"), UpdatedAt: d.time("updated_at"),
		DoneAt: d.time("done_at"), ExpireAt: d.time("expire_at"),
	}
	if d.err != nil {
		return nil, fmt.Errorf("redisledger: effect %s: %w", m["key"], d.err)
	}
	return e, nil
}

// decodeHistory decodes a run's history list: one ledger.Event JSON an item.
func decodeHistory(v any) ([]ledger.Event, error) {
	items, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("a history is a %T, not a list", v)
	}
	if len(items) == 0 {
		return nil, nil
	}
	out := make([]ledger.Event, len(items))
	for i, it := range items {
		s, _ := it.(string)
		if err := json.Unmarshal([]byte(s), &out[i]); err != nil {
			return nil, fmt.Errorf("history event %d %q: %w", i, s, err)
		}
	}
	return out, nil
}
