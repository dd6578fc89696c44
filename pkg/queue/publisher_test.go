package queue_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"

	"github.com/runonce/runonce/pkg/benchloop"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/queue/pubsubtest"
)

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

func inProcess(t testing.TB, opts ...pstest.ServerReactorOption) *pubsubtest.InProcess {
	t.Helper()
	ps, err := pubsubtest.NewInProcess(context.Background(), "proj", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ps.Close(); err != nil {
			t.Error(err)
		}
	})
	return ps
}

func TestPublishInProcess(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ps := inProcess(t)
	if _, err := queue.EnsureTopic(ctx, ps.Client, "runs"); err != nil {
		t.Fatal(err)
	}
	if _, err := queue.EnsureTopic(ctx, ps.Client, "runs"); err != nil {
		t.Fatalf("EnsureTopic twice: %v", err)
	}
	sub, err := queue.EnsureSubscription(ctx, ps.Client, "runs", "runs-worker", &pubsubpb.Subscription{AckDeadlineSeconds: 30})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := queue.EnsureSubscription(ctx, ps.Client, "runs", "runs-worker", nil); err != nil {
		t.Fatalf("EnsureSubscription twice: %v", err)
	}
	p := queue.NewPublisher(ps.Client, "runs", nil)
	defer p.Close()
	if err := p.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	m := message("a")
	id, err := p.Publish(ctx, m)
	if err != nil || id == "" {
		t.Fatalf("Publish: %q, %v", id, err)
	}
	got := ps.Server.Message(id)
	if got == nil {
		t.Fatal("the server does not have the message")
	}
	dec, err := queue.Decode(got.Attributes, got.Data)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(m, dec); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	// The subscription receives it.
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var once sync.Once
	err = ps.Client.Subscriber(sub).Receive(rctx, func(_ context.Context, msg *pubsub.Message) {
		msg.Ack()
		once.Do(cancel)
	})
	if err != nil {
		t.Fatal(err)
	}
	if rctx.Err() == nil || ctx.Err() != nil {
		t.Fatal("nothing received")
	}
}

func TestPingMissingTopic(t *testing.T) {
	t.Parallel()
	ps := inProcess(t)
	p := queue.NewPublisher(ps.Client, "absent", nil)
	defer p.Close()
	if err := p.Ping(t.Context()); !errors.Is(err, queue.ErrUnavailable) {
		t.Fatalf("Ping of a missing topic: %v, want ErrUnavailable", err)
	}
	if _, err := p.Publish(t.Context(), message("x")); !errors.Is(err, queue.ErrUnavailable) {
		t.Fatalf("Publish to a missing topic: %v, want ErrUnavailable", err)
	}
}

func TestPublishServerError(t *testing.T) {
	t.Parallel()
	ps := inProcess(t, pstest.WithErrorInjection("Publish", codes.Unavailable, "injected"))
	if _, err := queue.EnsureTopic(t.Context(), ps.Client, "runs"); err != nil {
		t.Fatal(err)
	}
	s := queue.LatencyPublishSettings()
	s.Timeout = 500 * time.Millisecond // the client retries Unavailable until then
	p := queue.NewPublisher(ps.Client, "runs", &queue.PublisherOptions{Settings: &s})
	defer p.Close()
	_, err := p.Publish(t.Context(), message("x"))
	if !errors.Is(err, queue.ErrUnavailable) {
		t.Fatalf("%v, want ErrUnavailable", err)
	}
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in            string
		project, name string
		ok            bool
	}{
		{"pubsub://proj/runs", "proj", "runs", true},
		{"pubsub://my-proj-123/runonce-runs", "my-proj-123", "runonce-runs", true},
		{"pubsub://proj/ab", "", "", false},
		{"pubsub://proj/", "", "", false},
		{"pubsub:///runs", "", "", false},
		{"pubsub://proj/a/b", "", "", false},
		{"pubsub://proj/runs?x=1", "", "", false},
		{"gcppubsub://proj/runs", "", "", false},
		{"projects/proj/topics/runs", "", "", false},
		{"", "", "", false},
	} {
		p, n, err := queue.ParseURL(c.in)
		if (err == nil) != c.ok || p != c.project || n != c.name {
			t.Errorf("ParseURL(%q) = %q, %q, %v", c.in, p, n, err)
		}
	}
}

func requireEmulator(tb testing.TB) {
	tb.Helper()
	if os.Getenv("PUBSUB_EMULATOR_HOST") == "" {
		if os.Getenv("CI") == "true" {
			tb.Fatal("PUBSUB_EMULATOR_HOST is not set under CI=true")
		}
		tb.Skip("set PUBSUB_EMULATOR_HOST to run against the Pub/Sub emulator")
	}
}

var topicSeq atomic.Int64

func emulatorPublisher(tb testing.TB, s *pubsub.PublishSettings) *queue.Publisher {
	tb.Helper()
	requireEmulator(tb)
	ctx := context.Background()
	topic := fmt.Sprintf("runs-%d-%d", time.Now().UnixNano(), topicSeq.Add(1))
	p, err := queue.OpenPublisher(ctx, "pubsub://runonce-test/"+topic, &queue.PublisherOptions{Settings: s})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	c, err := queue.NewClient(ctx, "runonce-test", nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	if _, err := queue.EnsureTopic(ctx, c, topic); err != nil {
		tb.Fatal(err)
	}
	return p
}

func TestPublishEmulator(t *testing.T) {
	t.Parallel()
	p := emulatorPublisher(t, nil)
	if err := p.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	id, err := p.Publish(t.Context(), message("e"))
	if err != nil || id == "" {
		t.Fatalf("%q %v", id, err)
	}
}

// BenchmarkPublishSettings compares the client's default batching with
// LatencyPublishSettings, each publish waited for, at several concurrencies, against
// the in-process server and (when PUBSUB_EMULATOR_HOST is set) the emulator.
func BenchmarkPublishSettings(b *testing.B) {
	defaults := pubsub.DefaultPublishSettings
	latency := queue.LatencyPublishSettings()
	settings := []struct {
		name string
		s    *pubsub.PublishSettings
	}{{"default-10ms", &defaults}, {"latency-1ms", &latency}}
	targets := []struct {
		name string
		open func(tb testing.TB, s *pubsub.PublishSettings) *queue.Publisher
	}{
		{"pstest", func(b testing.TB, s *pubsub.PublishSettings) *queue.Publisher {
			ps := inProcess(b)
			if _, err := queue.EnsureTopic(context.Background(), ps.Client, "runs"); err != nil {
				b.Fatal(err)
			}
			p := queue.NewPublisher(ps.Client, "runs", &queue.PublisherOptions{Settings: s})
			b.Cleanup(func() { p.Close() })
			return p
		}},
		{"emulator", emulatorPublisher},
	}
	for _, tg := range targets {
		for _, st := range settings {
			for _, conc := range []int{1, 8, 32} {
				b.Run(fmt.Sprintf("%s/%s/c=%d", tg.name, st.name, conc), func(b *testing.B) {
					p := tg.open(b, st.s)
					benchloop.Run(b, conc, func(_ context.Context, i int) error {
						_, err := p.Publish(context.Background(), message(strconv.Itoa(i)))
						return err
					})
				})
			}
		}
	}
}
