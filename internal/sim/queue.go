package sim

import (
	"strconv"
	"sync"
	"time"

	"github.com/runonce/runonce/pkg/queue"
)

// simQueue is a topic with one subscription that the driver delivers from: in any
// order, late, twice, or never.
type simQueue struct {
	mu    sync.Mutex
	clock *clock
	n     int
	msgs  []*queued
}

type queued struct {
	id          string
	m           *queue.Message
	publishedAt time.Time
	// availableAt is when it may be delivered (after a nack's backoff or a delay).
	availableAt time.Time
	deliveries  int
}

func (q *simQueue) publish(m *queue.Message) string {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.n++
	cp := *m
	now := q.clock.Now()
	e := &queued{id: strconv.Itoa(q.n), m: &cp, publishedAt: now, availableAt: now}
	q.msgs = append(q.msgs, e)
	return e.id
}

// ready returns the indexes of the messages that may be delivered now.
func (q *simQueue) ready() []int {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.clock.Now()
	var out []int
	for i, e := range q.msgs {
		if !e.availableAt.After(now) {
			out = append(out, i)
		}
	}
	return out
}

// take removes the i-th message (it is in flight).
func (q *simQueue) take(i int) *queued {
	q.mu.Lock()
	defer q.mu.Unlock()
	e := q.msgs[i]
	q.msgs = append(q.msgs[:i], q.msgs[i+1:]...)
	return e
}

// back returns a message in flight to the subscription, deliverable at at.
func (q *simQueue) back(e *queued, at time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	e.availableAt = at
	q.msgs = append(q.msgs, e)
}

func (q *simQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.msgs)
}
