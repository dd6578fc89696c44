package memqueue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/queue/memqueue"
)

// memQueue returns a topic with the subscription "sub" (options o) and a subscriber of
// it configured by so.
// message is a run's message for key (as pkg/queue's tests build it).
func message(key string) *queue.Message {
	payload := []byte(`{"n":1}`)
	return &queue.Message{
		Identity: ledger.Identity{
			RunID: ledger.KeyedRunID("ns", "job", key), Namespace: "ns", Job: "job", Key: key,
			PayloadHash: ledger.PayloadHash(payload), Payload: payload,
		},
		EnqueuedAt: time.Now().UTC().Truncate(time.Microsecond),
	}
}

func memQueue(t *testing.T, o *memqueue.SubscriptionOptions, so *queue.SubscriberOptions) (*memqueue.Topic, *memqueue.Publisher, *memqueue.Subscriber) {
	t.Helper()
	topic := memqueue.NewTopic("runs")
	if err := topic.CreateSubscription("sub", o); err != nil {
		t.Fatal(err)
	}
	sub, err := topic.Subscriber("sub", so)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { topic.Close() })
	return topic, topic.Publisher(), sub
}

// deliveries records what a Receive callback saw, per run ID.
type deliveries struct {
	mu       sync.Mutex
	attempts map[string][]int // DeliveryAttempt of each delivery
}

func (d *deliveries) add(r *queue.Delivery) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.attempts == nil {
		d.attempts = map[string][]int{}
	}
	id := r.Message.Identity.RunID
	d.attempts[id] = append(d.attempts[id], r.DeliveryAttempt)
	return len(d.attempts[id])
}

func (d *deliveries) of(runID string) []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]int(nil), d.attempts[runID]...)
}

func (d *deliveries) total() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, a := range d.attempts {
		n += len(a)
	}
	return n
}

// receive runs sub.Receive with f until the returned stop is called; stop returns
// Receive's error.
func receive(t *testing.T, sub *memqueue.Subscriber, f func(context.Context, *queue.Delivery)) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	finished := make(chan struct{})
	var err error
	go func() { err = sub.Receive(ctx, nil, f); close(finished) }()
	// A channel, not a sync.Once: waiting on it is durably blocking inside a synctest
	// bubble, so fake time goes on while one caller waits for the shutdown timeout.
	stop = func() error { cancel(); <-finished; return err }
	t.Cleanup(func() { stop() })
	return stop
}

// TestMemAckedOnce: every message published is delivered, and once acked never again,
// even after the ack deadline would have passed; the delivery carries the message.
func TestMemAckedOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		_, pub, sub := memQueue(t, nil, &queue.SubscriberOptions{Concurrency: 4, MaxExtension: time.Minute})
		var got deliveries
		stop := receive(t, sub, func(ctx context.Context, r *queue.Delivery) {
			if r.Err != nil {
				t.Errorf("delivery %s: %v", r.ID, r.Err)
			}
			got.add(r)
			r.Ack()
		})
		want := message("k0")
		ids := map[string]bool{}
		for i := range 20 {
			m := message(fmt.Sprint("k", i))
			id, err := pub.Publish(t.Context(), m)
			if err != nil {
				t.Fatal(err)
			}
			if ids[id] {
				t.Fatalf("message ID %s given twice", id)
			}
			ids[id] = true
		}
		time.Sleep(time.Hour) // far past MaxExtension: nothing acked comes back
		synctest.Wait()
		if n := got.total(); n != 20 {
			t.Fatalf("%d deliveries of 20 acked messages, want 20", n)
		}
		if a := got.of(want.Identity.RunID); len(a) != 1 || a[0] != 1 {
			t.Fatalf("run %s delivered with attempts %v, want [1]", want.Identity.RunID, a)
		}
		if err := stop(); err != nil {
			t.Fatalf("Receive after its context ended: %v", err)
		}
	})
}

// TestMemDeliveryIsACopy: a delivery decodes the published message, and a callback
// that changes its payload changes neither the publisher's nor a redelivery's.
func TestMemDeliveryIsACopy(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		_, pub, sub := memQueue(t, nil, nil)
		m := message("copy")
		var payloads []string
		var mu sync.Mutex
		receive(t, sub, func(ctx context.Context, r *queue.Delivery) {
			mu.Lock()
			defer mu.Unlock()
			payloads = append(payloads, string(r.Message.Identity.Payload))
			if r.Message.Identity.RunID != m.Identity.RunID || r.Message.Identity.PayloadHash != m.Identity.PayloadHash {
				t.Errorf("delivered identity %+v, published %+v", r.Message.Identity, m.Identity)
			}
			r.Message.Identity.Payload[0] = 'X'
			if len(payloads) == 1 {
				r.Nack()
			} else {
				r.Ack()
			}
		})
		if _, err := pub.Publish(t.Context(), m); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(payloads) != 2 || payloads[0] != `{"n":1}` || payloads[1] != `{"n":1}` {
			t.Fatalf("payloads delivered %q, want the published one twice", payloads)
		}
		if string(m.Data()) != `{"n":1}` {
			t.Fatalf("the publisher's payload became %q", m.Data())
		}
	})
}

// TestMemNackRedelivers: a nacked message comes back, after the subscription's
// MinBackoff and not before, with the next delivery attempt; at once without one.
func TestMemNackRedelivers(t *testing.T) {
	t.Parallel()
	for _, backoff := range []time.Duration{0, 10 * time.Second} {
		t.Run(fmt.Sprint("MinBackoff", backoff), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				_, pub, sub := memQueue(t, &memqueue.SubscriptionOptions{MinBackoff: backoff}, nil)
				var got deliveries
				receive(t, sub, func(ctx context.Context, r *queue.Delivery) {
					if got.add(r) < 3 {
						r.Nack()
						return
					}
					r.Ack()
				})
				m := message("nacked")
				if _, err := pub.Publish(t.Context(), m); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				if backoff > 0 {
					if a := got.of(m.Identity.RunID); len(a) != 1 {
						t.Fatalf("before the backoff: attempts %v, want [1]", a)
					}
					time.Sleep(backoff - time.Millisecond)
					synctest.Wait()
					if a := got.of(m.Identity.RunID); len(a) != 1 {
						t.Fatalf("just before the backoff: attempts %v, want [1]", a)
					}
					time.Sleep(backoff)
					synctest.Wait()
					time.Sleep(backoff)
					synctest.Wait()
				}
				if a := got.of(m.Identity.RunID); fmt.Sprint(a) != "[1 2 3]" {
					t.Fatalf("attempts %v, want [1 2 3] (two nacks, then an ack)", a)
				}
			})
		})
	}
}

// TestMemLostAckRedelivers: a delivery neither acked nor nacked (a callback that lost
// it) comes back once MaxExtension has passed, not before; the late ack of that first
// delivery is ignored, so the redelivery is still outstanding until it is acked itself.
func TestMemLostAckRedelivers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const ext = 30 * time.Second
		_, pub, sub := memQueue(t, nil, &queue.SubscriberOptions{Concurrency: 1, MaxExtension: ext})
		var got deliveries
		var first, second *queue.Delivery
		var mu sync.Mutex
		receive(t, sub, func(ctx context.Context, r *queue.Delivery) {
			mu.Lock()
			defer mu.Unlock()
			switch got.add(r) {
			case 1:
				first = r // lost: neither Ack nor Nack
			case 2:
				second = r
			}
		})
		m := message("lost")
		if _, err := pub.Publish(t.Context(), m); err != nil {
			t.Fatal(err)
		}
		time.Sleep(ext - time.Millisecond)
		synctest.Wait()
		if a := got.of(m.Identity.RunID); len(a) != 1 {
			t.Fatalf("before MaxExtension: attempts %v, want [1]", a)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if a := got.of(m.Identity.RunID); fmt.Sprint(a) != "[1 2]" {
			t.Fatalf("after MaxExtension: attempts %v, want [1 2]", a)
		}
		mu.Lock()
		first.Ack() // late: the message was redelivered since
		mu.Unlock()
		time.Sleep(ext)
		synctest.Wait()
		if a := got.of(m.Identity.RunID); fmt.Sprint(a) != "[1 2 3]" {
			t.Fatalf("a late ack of the first delivery acked the message: attempts %v, want [1 2 3]", a)
		}
		mu.Lock()
		second.Nack() // late too: ignored, not a fourth delivery
		mu.Unlock()
		synctest.Wait()
		if a := got.of(m.Identity.RunID); fmt.Sprint(a) != "[1 2 3]" {
			t.Fatalf("a late nack redelivered: attempts %v, want [1 2 3]", a)
		}
	})
}

// TestMemConcurrency: one subscription pulled by two Receives, fed by eight publishers
// at once: at most Concurrency callbacks run in each, and every message is delivered to
// exactly one of them, once.
func TestMemConcurrency(t *testing.T) {
	t.Parallel()
	const concurrency, publishers, each = 4, 8, 250
	topic, pub, sub := memQueue(t, nil, &queue.SubscriberOptions{Concurrency: concurrency})
	sub2, err := topic.Subscriber("sub", &queue.SubscriberOptions{Concurrency: concurrency})
	if err != nil {
		t.Fatal(err)
	}
	var got deliveries
	var acked atomic.Int64
	all := make(chan struct{})
	callback := func(running *atomic.Int64) func(context.Context, *queue.Delivery) {
		return func(ctx context.Context, r *queue.Delivery) {
			if n := running.Add(1); n > concurrency {
				t.Errorf("%d callbacks running at once, Concurrency is %d", n, concurrency)
			}
			got.add(r)
			time.Sleep(50 * time.Microsecond)
			running.Add(-1) // before the ack frees the slot
			r.Ack()
			if acked.Add(1) == publishers*each {
				close(all)
			}
		}
	}
	var run1, run2 atomic.Int64
	stop1 := receive(t, sub, callback(&run1))
	stop2 := receive(t, sub2, callback(&run2))
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Go(func() {
			for i := range each {
				if _, err := pub.Publish(t.Context(), message(fmt.Sprintf("p%d-%d", p, i))); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		t.Fatalf("%d of %d messages acked within 30s", acked.Load(), publishers*each)
	}
	if err := errors.Join(stop1(), stop2()); err != nil {
		t.Fatal(err)
	}
	got.mu.Lock()
	defer got.mu.Unlock()
	if len(got.attempts) != publishers*each {
		t.Fatalf("%d distinct messages delivered, want %d", len(got.attempts), publishers*each)
	}
	for id, a := range got.attempts {
		if len(a) != 1 {
			t.Fatalf("message of run %s delivered %d times (%v), want once", id, len(a), a)
		}
	}
}

// TestMemShutdownNacksAtOnce: when Receive's context ends, it takes no more deliveries,
// nacks its outstanding ones at once (another Receive gets them without waiting for an
// ack deadline), waits for its running callbacks within ShutdownTimeout, and a late ack
// from them is ignored.
func TestMemShutdownNacksAtOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		topic, pub, sub := memQueue(t, nil, &queue.SubscriberOptions{Concurrency: 2, MaxExtension: time.Hour, ShutdownTimeout: 5 * time.Second})
		release := make(chan struct{})
		var closeRelease sync.Once
		t.Cleanup(func() { closeRelease.Do(func() { close(release) }) }) // after the stop below
		var held atomic.Int64
		stop := receive(t, sub, func(ctx context.Context, r *queue.Delivery) {
			held.Add(1)
			<-release // still working when Receive is stopped
			r.Ack()   // late: already nacked
		})
		for i := range 3 {
			if _, err := pub.Publish(t.Context(), message(fmt.Sprint("s", i))); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		if n := held.Load(); n != 2 {
			t.Fatalf("%d callbacks running, want Concurrency's 2", n)
		}
		stopped := make(chan error, 1)
		start := time.Now()
		go func() { stopped <- stop() }()
		synctest.Wait()
		// The outstanding deliveries were nacked already: a second subscriber gets all
		// three messages while the first one's callbacks still run.
		sub2, err := topic.Subscriber("sub", &queue.SubscriberOptions{Concurrency: 8})
		if err != nil {
			t.Fatal(err)
		}
		var got deliveries
		receive(t, sub2, func(ctx context.Context, r *queue.Delivery) { got.add(r); r.Ack() })
		synctest.Wait()
		if n := got.total(); n != 3 {
			t.Fatalf("a second subscriber got %d of 3 messages after the first stopped, want 3 at once", n)
		}
		select {
		case err := <-stopped:
			t.Fatalf("Receive returned (%v) while its callbacks ran, before ShutdownTimeout", err)
		default:
		}
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited != 5*time.Second {
			t.Fatalf("Receive returned after %s, want ShutdownTimeout's 5s", waited)
		}
		closeRelease.Do(func() { close(release) })
		synctest.Wait()
		if n := got.total(); n != 3 {
			t.Fatalf("the late acks changed the deliveries: %d, want 3", n)
		}
	})
}

// TestMemClose: a closed topic refuses publishes with ErrUnavailable, and its
// subscribers' Receive returns, saying why; Ping says it too.
func TestMemClose(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		topic, pub, sub := memQueue(t, nil, nil)
		done := make(chan error, 1)
		go func() { done <- sub.Receive(context.Background(), nil, func(context.Context, *queue.Delivery) {}) }()
		synctest.Wait()
		if err := errors.Join(pub.Ping(t.Context()), sub.Ping(t.Context())); err != nil {
			t.Fatalf("Ping of an open topic: %v", err)
		}
		topic.Close()
		if err := <-done; !errors.Is(err, memqueue.ErrClosed) {
			t.Fatalf("Receive after Close: %v, want ErrMemClosed", err)
		}
		_, err := pub.Publish(t.Context(), message("late"))
		if !errors.Is(err, queue.ErrUnavailable) {
			t.Fatalf("Publish after Close: %v, want ErrUnavailable", err)
		}
		if err := pub.Ping(t.Context()); !errors.Is(err, queue.ErrUnavailable) {
			t.Fatalf("publisher Ping after Close: %v, want ErrUnavailable", err)
		}
		if err := sub.Ping(t.Context()); !errors.Is(err, queue.ErrUnavailable) {
			t.Fatalf("subscriber Ping after Close: %v, want ErrUnavailable", err)
		}
	})
}

// TestMemRetention: a message older than the subscription's retention is dropped, not
// delivered; Retention reports it for the worker's check.
func TestMemRetention(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		_, pub, sub := memQueue(t, &memqueue.SubscriptionOptions{Retention: time.Hour}, nil)
		if d, err := sub.Retention(t.Context()); err != nil || d != time.Hour {
			t.Fatalf("Retention = %s, %v; want 1h", d, err)
		}
		if _, err := pub.Publish(t.Context(), message("old")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour + time.Second) // nobody received it within the retention
		var got deliveries
		receive(t, sub, func(ctx context.Context, r *queue.Delivery) { got.add(r); r.Ack() })
		synctest.Wait()
		if n := got.total(); n != 0 {
			t.Fatalf("%d deliveries of a message past its retention, want 0", n)
		}
		_, _, def := memQueue(t, nil, nil)
		if d, _ := def.Retention(t.Context()); d != queue.DefaultSubscriptionRetention {
			t.Fatalf("default Retention = %s, want %s", d, queue.DefaultSubscriptionRetention)
		}
	})
}

// TestMemFilterAndRoute: each subscription stores the messages its filter accepts,
// and Route sends a message to one publisher or the other.
func TestMemFilterAndRoute(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		mine, others := memqueue.NewTopic("mine"), memqueue.NewTopic("others")
		for _, topic := range []*memqueue.Topic{mine, others} {
			if err := topic.CreateSubscription("all", nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := mine.CreateSubscription("k1", &memqueue.SubscriptionOptions{Filter: func(a map[string]string) bool { return a[queue.AttrKey] == "k1" }}); err != nil {
			t.Fatal(err)
		}
		if err := mine.CreateSubscription("all", nil); err == nil {
			t.Fatal("CreateSubscription of an existing ID succeeded")
		}
		if _, err := mine.Subscriber("missing", nil); err == nil {
			t.Fatal("Subscriber of a missing subscription succeeded")
		}
		pub := queue.Route(func(m *queue.Message) bool { return m.Identity.Key != "k3" }, mine.Publisher(), others.Publisher())
		for _, k := range []string{"k1", "k2", "k3"} {
			if _, err := pub.Publish(t.Context(), message(k)); err != nil {
				t.Fatal(err)
			}
		}
		keys := func(topic *memqueue.Topic, id string) map[string]bool {
			sub, err := topic.Subscriber(id, nil)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			got := map[string]bool{}
			receive(t, sub, func(ctx context.Context, r *queue.Delivery) {
				mu.Lock()
				got[r.Message.Identity.Key] = true
				mu.Unlock()
				r.Ack()
			})
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			return got
		}
		for _, c := range []struct {
			topic *memqueue.Topic
			sub   string
			want  string
		}{{mine, "all", "map[k1:true k2:true]"}, {mine, "k1", "map[k1:true]"}, {others, "all", "map[k3:true]"}} {
			if got := fmt.Sprint(keys(c.topic, c.sub)); got != c.want {
				t.Errorf("%s/%s received %s, want %s", c.topic.Name(), c.sub, got, c.want)
			}
		}
		others.Close()
		if err := pub.Ping(t.Context()); !errors.Is(err, queue.ErrUnavailable) {
			t.Fatalf("Route's Ping with one side closed: %v, want ErrUnavailable", err)
		}
		mine.Close()
	})
}
