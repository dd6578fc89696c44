// Package memqueue is the in-process transport between the embedded mode's (-dev)
// ingress and its own worker: a topic with pull subscriptions and Pub/Sub's delivery
// contract, without a network. Its Publisher is a queue.RunPublisher and its
// Subscriber yields the same *queue.Delivery as a Pub/Sub Subscriber, so that the
// ingress and the worker have one code path. It is a package of its own so that only
// a program that runs it links it.
package memqueue

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/runonce/runonce/pkg/queue"
)

// Scheme names the in-process transport's topics and subscriptions in logs:
// mem://TOPIC and mem://TOPIC/SUBSCRIPTION.
const Scheme = "mem"

// ErrClosed means the in-process topic was closed: nothing is published to it and
// its subscribers stop receiving. It wraps ErrUnavailable.
var ErrClosed = fmt.Errorf("%w: in-process topic closed", queue.ErrUnavailable)

// Topic is an in-process topic with pull subscriptions: the embedded mode's
// transport between its ingress and its own worker, with Pub/Sub's delivery contract
// and none of its network. Its Publisher is a RunPublisher and its Subscriber receives
// the same *Delivery as a Pub/Sub Subscriber, so that the ingress and the worker keep
// the one code path they have with Pub/Sub.
//
// Delivery is at least once, as with Pub/Sub: a message published is stored in every
// subscription of the topic at that moment (that its filter matches) and delivered until
// a delivery is acked. A nacked delivery comes back after the subscription's MinBackoff;
// a delivery neither acked nor nacked comes back once the subscriber's MaxExtension has
// passed since it was delivered (Pub/Sub's client stops extending its ack deadline then);
// a subscriber that stops receiving nacks its outstanding deliveries at once. An ack or
// nack of a delivery that was since redelivered is ignored. Ordering is not guaranteed.
// A message older than the subscription's Retention is dropped instead of delivered.
//
// Messages live as long as the process: unlike Pub/Sub, the topic is lost on exit (the
// embedded mode republishes the ledger's queued runs when it starts).
type Topic struct {
	name string
	mu   sync.Mutex
	subs map[string]*memSubscription
	next uint64 // last message ID
	done chan struct{}
}

// SubscriptionOptions configure a subscription of a Topic. Zero values mean the
// documented defaults.
type SubscriptionOptions struct {
	// Filter, when set, keeps the messages whose attributes it accepts (Pub/Sub's
	// subscription filter); the others are not stored in this subscription.
	Filter func(attrs map[string]string) bool
	// MinBackoff delays the redelivery of a nacked message (the retry policy's minimum
	// backoff). Zero: at once, as Pub/Sub without a retry policy.
	MinBackoff time.Duration
	// Retention is how long a message is kept undelivered or unacked. Defaults to
	// DefaultSubscriptionRetention.
	Retention time.Duration
}

// NewTopic returns an empty in-process topic named name.
func NewTopic(name string) *Topic {
	return &Topic{name: name, subs: map[string]*memSubscription{}, done: make(chan struct{})}
}

// Name returns mem://TOPIC.
func (t *Topic) Name() string { return Scheme + "://" + t.name }

// CreateSubscription adds the subscription id, which receives the messages published
// from now on. An id that exists is an error.
func (t *Topic) CreateSubscription(id string, o *SubscriptionOptions) error {
	if o == nil {
		o = &SubscriptionOptions{}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.subs[id]; ok {
		return fmt.Errorf("queue: subscription %s/%s already exists", t.Name(), id)
	}
	t.subs[id] = &memSubscription{
		topic: t, name: t.Name() + "/" + id, opts: *o,
		retention: max(o.Retention, 0),
		wake:      make(chan struct{}, 1),
	}
	if t.subs[id].retention == 0 {
		t.subs[id].retention = queue.DefaultSubscriptionRetention
	}
	return nil
}

// Publisher returns a publisher to t. Its Publish returns once the message is stored in
// every subscription, or ErrClosed.
func (t *Topic) Publisher() *Publisher { return &Publisher{t} }

// Subscriber returns a subscriber of the subscription id, configured by o as a Pub/Sub
// one is: Concurrency, MaxExtension and ShutdownTimeout apply (a Receive's options
// override them); Streams, MaxDurationPerAckExtension and Client mean nothing in
// process.
func (t *Topic) Subscriber(id string, o *queue.SubscriberOptions) (*Subscriber, error) {
	if o == nil {
		o = &queue.SubscriberOptions{}
	}
	t.mu.Lock()
	s, ok := t.subs[id]
	t.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("queue: subscription %s/%s does not exist (Topic.CreateSubscription)", t.Name(), id)
	}
	set := o.WithDefaults()
	return &Subscriber{
		sub: s, concurrency: set.Concurrency, maxExtension: set.MaxExtension, shutdown: set.ShutdownTimeout,
	}, nil
}

// Close closes the topic: later publishes fail with ErrClosed, and every Receive of
// its subscriptions stops as when its context is done. The messages are dropped.
func (t *Topic) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case <-t.done:
	default:
		close(t.done)
	}
	return nil
}

func (t *Topic) closed() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// publish stores m in every subscription its filter accepts.
func (t *Topic) publish(ctx context.Context, m *queue.Message) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("%w: publish run %s to %s: %w", queue.ErrUnavailable, m.Identity.RunID, t.Name(), err)
	}
	attrs := m.Attributes()
	data := slices.Clone(m.Data())
	t.mu.Lock()
	if t.closed() {
		t.mu.Unlock()
		return "", fmt.Errorf("publish run %s to %s: %w", m.Identity.RunID, t.Name(), ErrClosed)
	}
	t.next++
	id := strconv.FormatUint(t.next, 10)
	subs := make([]*memSubscription, 0, len(t.subs))
	for _, s := range t.subs {
		if s.opts.Filter == nil || s.opts.Filter(attrs) {
			subs = append(subs, s)
		}
	}
	t.mu.Unlock()
	now := time.Now()
	for _, s := range subs {
		// Each subscription gets its own copy, as from Pub/Sub.
		s.add(&memMessage{id: id, attrs: maps.Clone(attrs), data: slices.Clone(data), published: now})
	}
	return id, nil
}

// Publisher publishes to a Topic; it is a RunPublisher.
type Publisher struct{ t *Topic }

var _ queue.RunPublisher = (*Publisher)(nil)

// Publish stores m in every subscription of the topic that accepts it and returns its
// message ID; after Close it fails with ErrClosed.
func (p *Publisher) Publish(ctx context.Context, m *queue.Message) (string, error) {
	return p.t.publish(ctx, m)
}

// Ping fails with ErrClosed once the topic is closed.
func (p *Publisher) Ping(context.Context) error {
	if p.t.closed() {
		return ErrClosed
	}
	return nil
}

// memMessage is one message in one subscription.
type memMessage struct {
	id        string
	attrs     map[string]string
	data      []byte
	published time.Time
	// Guarded by the subscription's mu:
	attempts int         // deliveries so far
	lease    *memLease   // the outstanding delivery; nil when none
	acked    bool        // acked or dropped: never delivered again
	timer    *time.Timer // the outstanding delivery's expiry, or the nack's backoff
}

// memLease is one delivery of a message to one Receive.
type memLease struct {
	m     *memMessage
	recv  *memReceive
	attrs map[string]string // the message's, for the callback
	data  []byte
}

// memSubscription holds a subscription's messages.
type memSubscription struct {
	topic     *Topic
	name      string
	opts      SubscriptionOptions
	retention time.Duration
	wake      chan struct{} // signalled when ready may have a message
	mu        sync.Mutex
	ready     []*memMessage // deliverable now, oldest first
}

func (s *memSubscription) add(m *memMessage) {
	s.mu.Lock()
	s.ready = append(s.ready, m)
	s.mu.Unlock()
	s.signal()
}

func (s *memSubscription) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// take returns the next deliverable message's delivery, leased to r until maxExtension
// has passed, or nil when there is none. Messages past the retention are dropped.
func (s *memSubscription) take(r *memReceive, maxExtension time.Duration) (*memLease, *queue.Delivery) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.ready) > 0 {
		m := s.ready[0]
		s.ready[0] = nil
		s.ready = s.ready[1:]
		if m.acked || m.lease != nil {
			continue
		}
		if time.Since(m.published) > s.retention {
			m.acked = true
			continue
		}
		m.attempts++
		l := &memLease{m: m, recv: r}
		m.lease = l
		r.leases[l] = struct{}{}
		m.timer = time.AfterFunc(maxExtension, func() { s.settle(l, false, 0) })
		if len(s.ready) > 0 {
			s.signal() // another Receive may take the next one
		}
		// attrs and data are never changed, only dropped from m once it is acked: the
		// caller decodes them outside the lock.
		l.attrs, l.data = m.attrs, m.data
		return l, &queue.Delivery{ID: m.id, PublishTime: m.published, DeliveryAttempt: m.attempts}
	}
	return nil, nil
}

// settle ends the lease l: an ack drops the message, a nack (or an expiry) makes it
// deliverable again after backoff. A lease already ended is left alone. It reports
// whether l was still the message's lease.
func (s *memSubscription) settle(l *memLease, ack bool, backoff time.Duration) bool {
	s.mu.Lock()
	m := l.m
	if m.lease != l {
		s.mu.Unlock()
		return false
	}
	m.lease = nil
	m.timer.Stop()
	delete(l.recv.leases, l)
	l.recv.release()
	switch {
	case ack:
		m.acked = true
		m.data, m.attrs = nil, nil
		s.mu.Unlock()
	case backoff > 0:
		m.timer = time.AfterFunc(backoff, func() { s.requeue(m) })
		s.mu.Unlock()
	default:
		s.ready = append(s.ready, m)
		s.mu.Unlock()
		s.signal()
	}
	return true
}

func (s *memSubscription) requeue(m *memMessage) {
	s.mu.Lock()
	if m.acked || m.lease != nil {
		s.mu.Unlock()
		return
	}
	s.ready = append(s.ready, m)
	s.mu.Unlock()
	s.signal()
}

// Subscriber receives from one subscription of a Topic: the worker's Subscriber,
// as a Pub/Sub Subscriber is.
type Subscriber struct {
	sub          *memSubscription
	concurrency  int
	maxExtension time.Duration
	shutdown     time.Duration
}

// memReceive is one call of Receive: its flow control and its outstanding leases.
type memReceive struct {
	slots  chan struct{}          // one per outstanding delivery
	leases map[*memLease]struct{} // guarded by the subscription's mu
}

func (r *memReceive) release() { <-r.slots }

// Name returns mem://TOPIC/SUBSCRIPTION.
func (ms *Subscriber) Name() string { return ms.sub.name }

// Receive calls f for each delivery until ctx is done (or the topic is closed, an error
// wrapping ErrClosed), at most Concurrency at once; then it stops taking deliveries,
// nacks its outstanding ones at once, waits for running callbacks at most
// ShutdownTimeout and returns. The context f gets ends when Receive's does. o, when
// non-nil, overrides the subscriber's settings for this call. Several Receives may pull
// one subscription at once; each message goes to one of them at a time.
func (ms *Subscriber) Receive(ctx context.Context, o *queue.ReceiveOptions, f func(context.Context, *queue.Delivery)) error {
	if o == nil {
		o = &queue.ReceiveOptions{}
	}
	concurrency := cmp.Or(o.Concurrency, ms.concurrency)
	maxExtension := cmp.Or(o.MaxExtension, ms.maxExtension)
	shutdown := cmp.Or(o.ShutdownTimeout, ms.shutdown)
	s := ms.sub
	r := &memReceive{slots: make(chan struct{}, concurrency), leases: map[*memLease]struct{}{}}
	var wg sync.WaitGroup
	stop := ctx.Done()
	var err error
pull:
	for {
		select { // a free slot: at most concurrency deliveries outstanding
		case r.slots <- struct{}{}:
		case <-stop:
			break pull
		case <-s.topic.done:
			err = ErrClosed
			break pull
		}
		var l *memLease
		var rec *queue.Delivery
		for l == nil {
			if l, rec = s.take(r, maxExtension); l != nil {
				break
			}
			select {
			case <-s.wake:
			case <-stop:
				<-r.slots
				break pull
			case <-s.topic.done:
				<-r.slots
				err = ErrClosed
				break pull
			}
		}
		rec.Message, rec.Err = queue.Decode(l.attrs, slices.Clone(l.data)) // a copy per delivery, as from Pub/Sub
		rec.WithAcker(func() { s.settle(l, true, 0) }, func() { s.settle(l, false, s.opts.MinBackoff) })
		wg.Go(func() { f(ctx, rec) })
	}
	// Stopped: nack the outstanding deliveries at once (ShutdownBehaviorNackImmediately),
	// then wait for the running callbacks, at most the shutdown timeout.
	s.mu.Lock()
	leases := slices.Collect(maps.Keys(r.leases))
	s.mu.Unlock()
	for _, l := range leases {
		s.settle(l, false, 0)
	}
	s.signal() // a wake this Receive consumed belongs to another
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(shutdown):
	}
	if err != nil {
		return fmt.Errorf("queue: receive from %s: %w", s.name, err)
	}
	return nil
}

// Retention returns the subscription's message retention.
func (ms *Subscriber) Retention(context.Context) (time.Duration, error) {
	return ms.sub.retention, nil
}

// Ping fails with ErrClosed once the topic is closed.
func (ms *Subscriber) Ping(context.Context) error {
	if ms.sub.topic.closed() {
		return fmt.Errorf("subscription %s: %w", ms.sub.name, ErrClosed)
	}
	return nil
}
