package receivertest_test

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/receiver"
	"github.com/runonce/runonce/pkg/receiver/memory"
	"github.com/runonce/runonce/pkg/receiver/receivertest"
)

// The suite must catch a broken store. Each wrapper below breaks one guarantee of a
// correct store (memory); TestSuiteCatchesBrokenStores runs the whole suite against each
// in a child process and checks that it fails, and where.

const brokenEnv = "RECEIVERTEST_BROKEN"

type brokenStore struct {
	wrap     func(receiver.Store) receiver.Store
	mustFail []string
}

var brokenStores = map[string]brokenStore{
	// Tells every request of a key in flight that it holds the key.
	"TwoClaimWinners": {
		wrap: func(s receiver.Store) receiver.Store { return &lyingClaim{s} },
		mustFail: []string{"Claim/ConcurrentClaimsHaveOneWinner", "Claim/SecondClaimIsInFlight",
			"Lease/ConcurrentTakeoversHaveOneWinner", "HTTP/ConcurrentRequestsExecuteOnce"},
	},
	// Takes a key in flight over, live lease or not.
	"StealsLiveLeases": {
		wrap: func(s receiver.Store) receiver.Store { return &stealingClaim{s} },
		mustFail: []string{"Claim/SecondClaimIsInFlight", "Lease/RenewExtendsTheLease",
			"HTTP/ConcurrentRequestsExecuteOnce"},
	},
	// Ignores the run's fence.
	"IgnoresFences": {
		wrap: func(s receiver.Store) receiver.Store { return &noFence{s} },
		mustFail: []string{"Fence/StaleAttemptIsFencedAndWritesNothing", "Fence/ConcurrentAttemptsAreFencedInRealTime",
			"Fence/EveryOutcomeRaisesTheFence", "HTTP/SupersededAttemptNeverExecutes"},
	},
	// Judges the fence by a copy that lags the writes (a stale read, a cache).
	"ReadsAStaleFence": {
		wrap:     func(s receiver.Store) receiver.Store { return &laggingFence{Store: s, seen: map[string]int64{}} },
		mustFail: []string{"Fence/ConcurrentAttemptsAreFencedInRealTime"},
	},
	// Stores the response of whoever completes, token or not.
	"CompletesForAnyToken": {
		wrap: func(s receiver.Store) receiver.Store { return &anyTokenComplete{s} },
		mustFail: []string{"Claim/CompleteIsFencedByToken", "Lease/ExpiredLeaseIsTakenOverNeverReplayed",
			"HTTP/LostLeaseIsNeverReplayedAsSuccess"},
	},
	// Stores a response without its body.
	"ForgetsBodies": {
		wrap:     func(s receiver.Store) receiver.Store { return &forgetfulComplete{s} },
		mustFail: []string{"Claim/CompletedResponseIsReplayed", "HTTP/ConcurrentRequestsExecuteOnce"},
	},
	// Answers a key reused with another body as the same request.
	"IgnoresFingerprints": {
		wrap:     func(s receiver.Store) receiver.Store { return &anyFingerprint{s} },
		mustFail: []string{"Claim/OtherFingerprintIsMismatch"},
	},
	// Still replays a completed record past its retention.
	"ExpiredRecordsCount": {
		wrap:     func(s receiver.Store) receiver.Store { return &expiryIgnored{s} },
		mustFail: []string{"Retention/ExpiredRecordIsClaimedAnew"},
	},
	// Sweeps every record, expired or not.
	"SweepsLiveRecords": {
		wrap:     func(s receiver.Store) receiver.Store { return &sweepsAll{Store: s} },
		mustFail: []string{"Retention/SweepDeletesOnlyWhatExpired"},
	},
}

func TestSuiteCatchesBrokenStores(t *testing.T) {
	for name, b := range brokenStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestBrokenStore$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), brokenEnv+"="+name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed against a store that %s:\n%s", name, tail(out))
			}
			failed := failures(string(out))
			for _, want := range b.mustFail {
				if !slices.Contains(failed, want) {
					t.Errorf("the suite did not fail %s against a store that %s; it failed %v", want, name, failed)
				}
			}
			t.Logf("the suite failed %d tests against %s: %v", len(failed), name, failed)
		})
	}
}

// TestBrokenStore is the child of TestSuiteCatchesBrokenStores.
func TestBrokenStore(t *testing.T) {
	name := os.Getenv(brokenEnv)
	if name == "" {
		t.Skip("runs only as the child process of TestSuiteCatchesBrokenStores")
	}
	b, ok := brokenStores[name]
	if !ok {
		t.Fatalf("no broken store %q", name)
	}
	receivertest.Run(t, receivertest.Harness{Open: func(testing.TB) receiver.Store { return b.wrap(memory.New(nil)) }})
}

var failLine = regexp.MustCompile(`--- FAIL: TestBrokenStore/(\S+)`)

func failures(out string) []string {
	var names []string
	for _, m := range failLine.FindAllStringSubmatch(out, -1) {
		names = append(names, m[1])
	}
	return names
}

func tail(out []byte) string {
	lines := strings.Split(string(out), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}

type lyingClaim struct{ receiver.Store }

func (s *lyingClaim) Claim(ctx context.Context, p *receiver.ClaimParams) (*receiver.Claim, error) {
	c, err := s.Store.Claim(ctx, p)
	if err == nil && c.Outcome == receiver.OutcomeInFlight {
		c.Outcome = receiver.OutcomeClaimed
	}
	return c, err
}

type stealingClaim struct{ receiver.Store }

func (s *stealingClaim) Claim(ctx context.Context, p *receiver.ClaimParams) (*receiver.Claim, error) {
	c, err := s.Store.Claim(ctx, p)
	if err == nil && c.Outcome == receiver.OutcomeInFlight {
		_ = s.Release(ctx, &receiver.ReleaseParams{Key: p.Key, Token: c.Record.Token})
		return s.Store.Claim(ctx, p)
	}
	return c, err
}

type noFence struct{ receiver.Store }

func (s *noFence) Claim(ctx context.Context, p *receiver.ClaimParams) (*receiver.Claim, error) {
	if p.Key == "" {
		return &receiver.Claim{Outcome: receiver.OutcomeClaimed}, nil
	}
	q := *p
	q.Fence = nil
	return s.Store.Claim(ctx, &q)
}

// laggingFence fences by a copy of the highest attempts that learns of a new one 50ms
// after it was seen.
type laggingFence struct {
	receiver.Store
	mu   sync.Mutex
	seen map[string]int64
}

func (s *laggingFence) Claim(ctx context.Context, p *receiver.ClaimParams) (*receiver.Claim, error) {
	if p.Fence != nil {
		s.mu.Lock()
		seen := s.seen[p.Fence.Run]
		s.mu.Unlock()
		if seen > p.Fence.Attempt {
			return &receiver.Claim{Outcome: receiver.OutcomeFenced, Attempt: seen}, nil
		}
		run, attempt := p.Fence.Run, p.Fence.Attempt
		time.AfterFunc(50*time.Millisecond, func() {
			s.mu.Lock()
			s.seen[run] = max(s.seen[run], attempt)
			s.mu.Unlock()
		})
	}
	if p.Key == "" {
		return &receiver.Claim{Outcome: receiver.OutcomeClaimed}, nil
	}
	q := *p
	q.Fence = nil
	return s.Store.Claim(ctx, &q)
}

type anyTokenComplete struct{ receiver.Store }

func (s *anyTokenComplete) Complete(ctx context.Context, p *receiver.CompleteParams) error {
	if r, err := s.Get(ctx, p.Key); err == nil && r.State == receiver.StateInFlight {
		q := *p
		q.Token = r.Token
		return s.Store.Complete(ctx, &q)
	}
	return s.Store.Complete(ctx, p)
}

type forgetfulComplete struct{ receiver.Store }

func (s *forgetfulComplete) Complete(ctx context.Context, p *receiver.CompleteParams) error {
	q := *p
	resp := *p.Response
	resp.Body = nil
	q.Response = &resp
	return s.Store.Complete(ctx, &q)
}

type anyFingerprint struct{ receiver.Store }

func (s *anyFingerprint) Claim(ctx context.Context, p *receiver.ClaimParams) (*receiver.Claim, error) {
	c, err := s.Store.Claim(ctx, p)
	if err == nil && c.Outcome == receiver.OutcomeMismatch {
		q := *p
		q.Fingerprint = c.Record.Fingerprint
		return s.Store.Claim(ctx, &q)
	}
	return c, err
}

type expiryIgnored struct{ receiver.Store }

func (s *expiryIgnored) Claim(ctx context.Context, p *receiver.ClaimParams) (*receiver.Claim, error) {
	if p.Key != "" {
		if r, err := s.Get(ctx, p.Key); err == nil && r.State == receiver.StateCompleted && !time.Now().Before(r.ExpireAt) {
			return &receiver.Claim{Outcome: receiver.OutcomeCompleted, Record: r}, nil
		}
	}
	return s.Store.Claim(ctx, p)
}

// sweepsAll answers every key it has seen claimed as gone after a sweep, expired or not.
type sweepsAll struct {
	receiver.Store
	mu    sync.Mutex
	seen  []string
	swept map[string]bool
}

func (s *sweepsAll) Claim(ctx context.Context, p *receiver.ClaimParams) (*receiver.Claim, error) {
	c, err := s.Store.Claim(ctx, p)
	if err == nil && c.Outcome == receiver.OutcomeClaimed && p.Key != "" {
		s.mu.Lock()
		s.seen = append(s.seen, p.Key)
		s.mu.Unlock()
	}
	return c, err
}

func (s *sweepsAll) Sweep(ctx context.Context, limit int) (int, error) {
	n, err := s.Store.Sweep(ctx, limit)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.swept == nil {
		s.swept = map[string]bool{}
	}
	for _, k := range s.seen {
		s.swept[k] = true
	}
	return n, err
}

func (s *sweepsAll) Get(ctx context.Context, key string) (*receiver.Record, error) {
	s.mu.Lock()
	swept := s.swept[key]
	s.mu.Unlock()
	if swept {
		return nil, receiver.ErrNotFound
	}
	return s.Store.Get(ctx, key)
}
