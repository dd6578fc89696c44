package queue

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// DefaultSubscriptionRetention is Pub/Sub's default message retention of a subscription.
const DefaultSubscriptionRetention = 7 * 24 * time.Hour

// SubscriberOptions configure a Subscriber. Zero values mean the documented defaults.
type SubscriberOptions struct {
	// Concurrency bounds the messages handled at once (the client's
	// MaxOutstandingMessages: its callback concurrency is the worker pool). Defaults to 8;
	// a worker's Config.Concurrency replaces it.
	Concurrency int
	// Streams is the number of StreamingPull streams (NumGoroutines): one stream from the
	// emulator delivers ~1,750 messages/s, four ~7,000/s. Defaults to 4.
	Streams int
	// MaxExtension is how long the client keeps extending a message's ack deadline: at
	// least the longest job. Defaults to 60m; a worker sizes it to its jobs.
	MaxExtension time.Duration
	// MaxDurationPerAckExtension bounds each extension, so that the messages of a
	// crashed worker come back within it. Defaults to 60s (Pub/Sub allows 10s to 600s).
	MaxDurationPerAckExtension time.Duration
	// ShutdownTimeout bounds how long Receive waits for running callbacks after its
	// context is done. Never unbounded. Defaults to 10s.
	//
	// At shutdown the outstanding messages are nacked at once
	// (ShutdownBehaviorNackImmediately) while their callbacks go on running: with
	// WaitForProcessing, the client (v2.9.0) stops its streams first and drops the nacks
	// sent after that, so a released run's message would wait out its ack deadline. An
	// early nack is safe: a redelivery finds the run held until its job finishes or is
	// released, and a late ack or nack of a nacked message is ignored.
	ShutdownTimeout time.Duration
	// Client configures the client OpenSubscriber creates.
	Client ClientOptions
}

// WithDefaults returns o with each zero setting replaced by its documented default:
// the one place they are applied, for a Subscriber and for another transport
// (memqueue) alike.
func (o SubscriberOptions) WithDefaults() SubscriberOptions {
	o.Concurrency = cmp.Or(o.Concurrency, 8)
	o.Streams = cmp.Or(o.Streams, 4)
	o.MaxExtension = cmp.Or(o.MaxExtension, 60*time.Minute)
	o.MaxDurationPerAckExtension = cmp.Or(o.MaxDurationPerAckExtension, 60*time.Second)
	o.ShutdownTimeout = cmp.Or(o.ShutdownTimeout, 10*time.Second)
	return o
}

func (o SubscriberOptions) settings() pubsub.ReceiveSettings {
	o = o.WithDefaults()
	return pubsub.ReceiveSettings{
		MaxOutstandingMessages:     o.Concurrency,
		NumGoroutines:              o.Streams,
		MaxExtension:               o.MaxExtension,
		MaxDurationPerAckExtension: o.MaxDurationPerAckExtension,
		ShutdownOptions: &pubsub.ShutdownOptions{
			Behavior: pubsub.ShutdownBehaviorNackImmediately,
			Timeout:  o.ShutdownTimeout,
		},
	}
}

// Subscriber receives runs from one pull subscription.
type Subscriber struct {
	client    *pubsub.Client
	ownClient bool
	sub       *pubsub.Subscriber
	opts      SubscriberOptions
	name      string // projects/P/subscriptions/S
}

// OpenSubscriber opens pubsub://PROJECT/SUBSCRIPTION. It honours PUBSUB_EMULATOR_HOST.
func OpenSubscriber(ctx context.Context, rawURL string, o *SubscriberOptions) (*Subscriber, error) {
	if o == nil {
		o = &SubscriberOptions{}
	}
	project, id, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	c, err := NewClient(ctx, project, &o.Client)
	if err != nil {
		return nil, err
	}
	s := NewSubscriber(c, id, o)
	s.ownClient = true
	return s, nil
}

// NewSubscriber receives from subscriptionID with client, which stays the caller's.
func NewSubscriber(client *pubsub.Client, subscriptionID string, o *SubscriberOptions) *Subscriber {
	if o == nil {
		o = &SubscriberOptions{}
	}
	name := fmt.Sprintf("projects/%s/subscriptions/%s", client.Project(), subscriptionID)
	sub := client.Subscriber(name)
	sub.ReceiveSettings = o.settings()
	return &Subscriber{client: client, sub: sub, opts: *o, name: name}
}

// Name returns the subscription's full name.
func (s *Subscriber) Name() string { return s.name }

// Delivery is one delivery of a message, pulled or pushed: the one type a worker
// processes. A pulled delivery must be acked or nacked, exactly once; Ack and Nack of a
// delivery without an acknowledger (a push delivery, whose HTTP answer acks it, or one a
// test builds) do nothing.
type Delivery struct {
	// Message is the decoded run; nil when Err is set.
	Message *Message
	// Err says why the message is not a runonce message (it can never be run).
	Err error
	// ID is Pub/Sub's message ID.
	ID string
	// DeliveryAttempt is Pub/Sub's count where a dead-letter policy provides it, else 0.
	DeliveryAttempt int
	// PublishTime is when Pub/Sub accepted the message.
	PublishTime time.Time
	ack, nack   func()
}

// WithAcker sets what Ack and Nack call, for a transport that builds deliveries of its
// own, and returns d.
func (d *Delivery) WithAcker(ack, nack func()) *Delivery {
	d.ack, d.nack = ack, nack
	return d
}

// Ack acknowledges the message: it will not be delivered again.
func (d *Delivery) Ack() {
	if d.ack != nil {
		d.ack()
	}
}

// Nack asks Pub/Sub to deliver the message again (after the subscription's retry
// policy's backoff).
func (d *Delivery) Nack() {
	if d.nack != nil {
		d.nack()
	}
}

// ReceiveOptions are a receiver's settings for one Receive; a zero field keeps the
// subscriber's own (SubscriberOptions).
type ReceiveOptions struct {
	// Concurrency bounds the messages handled at once.
	Concurrency int
	// MaxExtension is how long a message's ack deadline is kept extended: at least the
	// longest job.
	MaxExtension time.Duration
	// ShutdownTimeout bounds how long Receive waits for running callbacks once its
	// context is done.
	ShutdownTimeout time.Duration
}

// Receive calls f for each message until ctx is done, then stops pulling, waits for
// running callbacks at most ShutdownTimeout and returns. Callbacks run concurrently, at
// most Concurrency at once; the context f gets ends when Receive's does. o, when
// non-nil, overrides the subscriber's settings for this call. One Receive at a time.
func (s *Subscriber) Receive(ctx context.Context, o *ReceiveOptions, f func(context.Context, *Delivery)) error {
	s.sub.ReceiveSettings = s.opts.settings()
	if o != nil {
		rs := &s.sub.ReceiveSettings
		rs.MaxOutstandingMessages = cmp.Or(o.Concurrency, rs.MaxOutstandingMessages)
		rs.MaxExtension = cmp.Or(o.MaxExtension, rs.MaxExtension)
		rs.ShutdownOptions.Timeout = cmp.Or(o.ShutdownTimeout, rs.ShutdownOptions.Timeout)
	}
	err := s.sub.Receive(ctx, func(ctx context.Context, m *pubsub.Message) {
		d := &Delivery{ID: m.ID, PublishTime: m.PublishTime, ack: m.Ack, nack: m.Nack}
		if m.DeliveryAttempt != nil {
			d.DeliveryAttempt = *m.DeliveryAttempt
		}
		d.Message, d.Err = Decode(m.Attributes, m.Data)
		f(ctx, d)
	})
	if err != nil {
		return fmt.Errorf("queue: receive from %s: %w", s.name, err)
	}
	return nil
}

// Retention returns the subscription's message retention (Pub/Sub's default when it
// sets none): the worker checks the ledger's retention outlasts it.
func (s *Subscriber) Retention(ctx context.Context) (time.Duration, error) {
	sub, err := s.client.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: s.name})
	if err != nil {
		return 0, fmt.Errorf("%w: subscription %s: %w", ErrUnavailable, s.name, err)
	}
	if d := sub.GetMessageRetentionDuration(); d != nil && d.AsDuration() > 0 {
		return d.AsDuration(), nil
	}
	return DefaultSubscriptionRetention, nil
}

// Ping checks that the subscription exists and is reachable (for /readyz).
func (s *Subscriber) Ping(ctx context.Context) error {
	_, err := s.Retention(ctx)
	return err
}

// Close closes the client if OpenSubscriber created it.
func (s *Subscriber) Close() error {
	if s.ownClient {
		return s.client.Close()
	}
	return nil
}
