package queue

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runonce/runonce/pkg/internal/gcpenv"
)

// ErrUnavailable means Pub/Sub did not take the message (or could not be reached): the
// message was not published, or it is not known to have been. Retrying is safe: the
// worker deduplicates by run ID. The underlying gRPC status stays in the chain.
var ErrUnavailable = errors.New("queue: Pub/Sub unavailable")

// Scheme is the URL scheme of topics and subscriptions: pubsub://PROJECT/NAME.
const Scheme = "pubsub"

// DefaultPublishTimeout bounds one publish, batching and retries included.
const DefaultPublishTimeout = 5 * time.Second

// LatencyPublishSettings returns the publish settings the ingress uses: a 1 ms delay
// threshold instead of the client's 10 ms, so a lone message is sent at once while
// concurrent ones still share a request under load, and a timeout short enough for a
// caller that waits for the result before it answers. BenchmarkPublishSettings measures
// the choice against pubsub.DefaultPublishSettings.
func LatencyPublishSettings() pubsub.PublishSettings {
	s := pubsub.DefaultPublishSettings
	s.DelayThreshold = time.Millisecond
	s.CountThreshold = 100
	s.Timeout = DefaultPublishTimeout
	return s
}

// ParseURL splits pubsub://PROJECT/NAME into its project and resource ID. Pub/Sub IDs
// are 3 to 255 characters; the URL takes no query parameters.
func ParseURL(rawURL string) (project, id string, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", "", fmt.Errorf("queue: malformed URL %q: %w", rawURL, err)
	}
	if u.Scheme != Scheme {
		return "", "", fmt.Errorf("queue: URL %q: scheme must be %s:// (pubsub://PROJECT/TOPIC)", rawURL, Scheme)
	}
	if len(u.Query()) > 0 || u.User != nil || u.Fragment != "" {
		return "", "", fmt.Errorf("queue: URL %q: takes no user, query or fragment (pubsub://PROJECT/TOPIC)", rawURL)
	}
	project, id = u.Host, strings.TrimPrefix(u.Path, "/")
	if project == "" || id == "" || strings.Contains(id, "/") {
		return "", "", fmt.Errorf("queue: URL %q: want pubsub://PROJECT/NAME with one path segment", rawURL)
	}
	if n := len(id); n < 3 || n > 255 {
		return "", "", fmt.Errorf("queue: URL %q: Pub/Sub names are 3 to 255 characters, %q has %d", rawURL, id, n)
	}
	return project, id, nil
}

// ClientOptions configure NewClient.
type ClientOptions struct {
	// Tracing turns on the client's OpenTelemetry tracing (pubsub.ClientConfig's
	// EnableOpenTelemetryTracing): publish spans, with the trace context carried in the
	// message's googclient_ attributes.
	Tracing bool
	// Options are passed to the client, e.g. option.WithGRPCConn for an in-process server.
	Options []option.ClientOption
}

// NewClient returns a Pub/Sub client for project. It honours PUBSUB_EMULATOR_HOST.
func NewClient(ctx context.Context, project string, o *ClientOptions) (*pubsub.Client, error) {
	if o == nil {
		o = &ClientOptions{}
	}
	c, err := pubsub.NewClientWithConfig(ctx, project, &pubsub.ClientConfig{EnableOpenTelemetryTracing: o.Tracing}, o.Options...)
	if err != nil {
		return nil, fmt.Errorf("queue: Pub/Sub client for project %q: %w", project, gcpenv.EmulatorHint(err, gcpenv.PubSubEmulator))
	}
	return c, nil
}

// PublisherOptions configure a Publisher.
type PublisherOptions struct {
	// Settings replace LatencyPublishSettings when non-nil.
	Settings *pubsub.PublishSettings
	// Client configures the client OpenPublisher creates; ignored by NewPublisher.
	Client ClientOptions
}

// RunPublisher publishes runs: the ingress publishes each new run with one, a worker's
// rescuer republishes lost runs with one. *Publisher is one; another transport, or a
// test's fault injector, may be another.
type RunPublisher interface {
	// Publish returns once the message is stored, with its server ID; an error means
	// it is not known to be (retrying is safe: the worker deduplicates by run ID).
	Publish(ctx context.Context, m *Message) (serverID string, err error)
	// Ping checks that the topic is reachable, for readiness.
	Ping(ctx context.Context) error
}

var _ RunPublisher = (*Publisher)(nil)

// Publisher publishes runs to one topic and waits for each result. It is safe for
// concurrent use.
type Publisher struct {
	client    *pubsub.Client
	ownClient bool
	pub       *pubsub.Publisher
	name      string // projects/P/topics/T
}

// OpenPublisher opens pubsub://PROJECT/TOPIC. The topic is not created and not checked:
// Ping checks it.
func OpenPublisher(ctx context.Context, rawURL string, o *PublisherOptions) (*Publisher, error) {
	if o == nil {
		o = &PublisherOptions{}
	}
	project, topic, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	c, err := NewClient(ctx, project, &o.Client)
	if err != nil {
		return nil, err
	}
	p := NewPublisher(c, topic, o)
	p.ownClient = true
	return p, nil
}

// NewPublisher publishes to topicID with client, which stays the caller's to close.
func NewPublisher(client *pubsub.Client, topicID string, o *PublisherOptions) *Publisher {
	s := LatencyPublishSettings()
	if o != nil && o.Settings != nil {
		s = *o.Settings
	}
	name := fmt.Sprintf("projects/%s/topics/%s", client.Project(), topicID)
	pub := client.Publisher(name)
	pub.PublishSettings = s
	return &Publisher{client: client, pub: pub, name: name}
}

// Topic returns the topic's full name, projects/P/topics/T.
func (p *Publisher) Topic() string { return p.name }

// Publish publishes m and waits until Pub/Sub has stored it, returning the server's
// message ID. Any failure wraps ErrUnavailable. Once ctx is done Publish stops waiting,
// though the message may still be sent.
func (p *Publisher) Publish(ctx context.Context, m *Message) (string, error) {
	res := p.pub.Publish(ctx, &pubsub.Message{Data: m.Data(), Attributes: m.Attributes()})
	id, err := res.Get(ctx)
	if err != nil {
		return "", fmt.Errorf("%w: publish run %s to %s: %w", ErrUnavailable, m.Identity.RunID, p.name, err)
	}
	return id, nil
}

// Ping checks that the topic exists and is reachable (for /readyz). A missing topic is
// ErrUnavailable too: nothing can be enqueued.
func (p *Publisher) Ping(ctx context.Context) error {
	if _, err := p.client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: p.name}); err != nil {
		if status.Code(err) == codes.NotFound {
			return fmt.Errorf("%w: topic %s does not exist: %w", ErrUnavailable, p.name, err)
		}
		return fmt.Errorf("%w: topic %s: %w", ErrUnavailable, p.name, err)
	}
	return nil
}

// Close sends what is batched, stops the publisher and closes the client if
// OpenPublisher created it.
func (p *Publisher) Close() error {
	p.pub.Stop()
	if p.ownClient {
		if err := p.client.Close(); err != nil {
			return fmt.Errorf("queue: close Pub/Sub client: %w", err)
		}
	}
	return nil
}
