package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// errCrashed is what every call of a crashed actor returns once the schedule is over
// and its goroutine is let go. It is not retryable, so the actor ends at once.
var errCrashed = errors.New("sim: this actor crashed; the call never left it")

// actor is one goroutine of the simulation: a request, a delivery or a rescue round.
type actor struct {
	id   int
	name string
	wake chan bool // true: go on; false: crashed, return errCrashed
	// crashed is set by the driver when it crashes the actor (parked forever).
	crashed bool
	// onCrash runs in the driver when the actor crashes (e.g. redeliver its message).
	onCrash func()
	// paused is set for a delivery whose worker process pauses whenever the actor is
	// parked at a call: its lease keeper does not renew meanwhile.
	paused bool
	// request is set for an ingress request, which started at started; delivery for a
	// worker's delivery.
	request  bool
	delivery bool
	started  time.Time
}

type actorKey struct{}

func actorFrom(ctx context.Context) *actor {
	a, _ := ctx.Value(actorKey{}).(*actor)
	return a
}

// sched hands one baton between the driver and the actors: exactly one of them runs at
// a time, so that the driver's random choices alone decide the interleaving.
type sched struct {
	mu     sync.Mutex
	parked []*actor
	hung   []*actor
	// blocked are the actors waiting for their context to end (a hung job), with it.
	blocked []blocked
	nextID  int
	// idle receives when the running actor parks or ends.
	idle chan struct{}
	// stuck bounds how long the driver waits for an actor to park or end.
	stuck time.Duration
	wg    sync.WaitGroup
	// over is closed when the schedule is over: parked actors are let go as crashed.
	over bool
}

func newSched() *sched { return &sched{idle: make(chan struct{}, 1), stuck: 30 * time.Second} }

// spawn starts fn as a new actor holding the baton and waits until it parks or ends.
func (s *sched) spawn(ctx context.Context, name string, fn func(ctx context.Context, a *actor)) (*actor, error) {
	s.mu.Lock()
	s.nextID++
	a := &actor{id: s.nextID, name: name, wake: make(chan bool, 1)}
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() { s.idle <- struct{}{} }()
		fn(context.WithValue(ctx, actorKey{}, a), a)
	}()
	return a, s.wait(a)
}

// point parks the calling actor until the driver lets it go on. It returns errCrashed
// for an actor crashed meanwhile; calls made outside any actor pass.
func (s *sched) point(ctx context.Context) error {
	a := actorFrom(ctx)
	if a == nil {
		return nil
	}
	s.mu.Lock()
	if a.crashed || s.over {
		s.mu.Unlock()
		return errCrashed
	}
	s.parked = append(s.parked, a)
	s.mu.Unlock()
	s.idle <- struct{}{}
	if !<-a.wake {
		return errCrashed
	}
	return nil
}

// grant lets the i-th parked actor go on and waits until it parks again or ends.
func (s *sched) grant(i int) error {
	s.mu.Lock()
	a := s.parked[i]
	s.parked = append(s.parked[:i], s.parked[i+1:]...)
	s.mu.Unlock()
	a.wake <- true
	return s.wait(a)
}

// crash takes the i-th parked actor out of the schedule: it never runs again.
func (s *sched) crash(i int) *actor {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.parked[i]
	s.parked = append(s.parked[:i], s.parked[i+1:]...)
	a.crashed = true
	return a
}

// name names the i-th parked actor.
func (s *sched) name(i int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("actor %d (%s)", s.parked[i].id, s.parked[i].name)
}

// parkedActor returns the i-th parked actor.
func (s *sched) parkedActor(i int) *actor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.parked[i]
}

// hang parks the calling actor for good: the driver never lets it go on, and it
// returns errCrashed when the schedule ends.
func (s *sched) hang(ctx context.Context) error {
	a := actorFrom(ctx)
	if a == nil {
		return nil
	}
	s.mu.Lock()
	if a.crashed || s.over {
		s.mu.Unlock()
		return errCrashed
	}
	s.hung = append(s.hung, a)
	s.mu.Unlock()
	s.idle <- struct{}{}
	<-a.wake
	return errCrashed
}

type blocked struct {
	a   *actor
	ctx context.Context
}

// block parks the calling actor until ctx ends, as a job that hangs does: once it has,
// unblock makes the actor one the driver may let go on, and block returns ctx's cause.
func (s *sched) block(ctx context.Context) error {
	a := actorFrom(ctx)
	if a == nil {
		<-ctx.Done()
		return context.Cause(ctx)
	}
	s.mu.Lock()
	if a.crashed || s.over {
		s.mu.Unlock()
		return errCrashed
	}
	if ctx.Err() != nil {
		s.mu.Unlock()
		return context.Cause(ctx)
	}
	s.blocked = append(s.blocked, blocked{a: a, ctx: ctx})
	s.mu.Unlock()
	s.idle <- struct{}{}
	if !<-a.wake {
		return errCrashed
	}
	return context.Cause(ctx)
}

// unblock parks, in the order they blocked, the blocked actors whose context ended, and
// returns them.
func (s *sched) unblock() []blocked {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []blocked
	still := s.blocked[:0]
	for _, b := range s.blocked {
		if b.ctx.Err() != nil {
			s.parked = append(s.parked, b.a)
			out = append(out, b)
			continue
		}
		still = append(still, b)
	}
	s.blocked = still
	return out
}

// isParked reports whether a is parked at a call.
func (s *sched) isParked(a *actor) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.parked, a)
}

func (s *sched) nparked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.parked)
}

func (s *sched) wait(a *actor) error {
	t := time.NewTimer(s.stuck)
	defer t.Stop()
	select {
	case <-s.idle:
		return nil
	case <-t.C:
		return fmt.Errorf("sim: actor %d (%s) neither reached a call nor ended within %s: it blocks on something the simulation does not drive", a.id, a.name, s.stuck)
	}
}

// end lets every parked or crashed actor go, as crashed, and waits for them all.
func (s *sched) end(crashed []*actor) {
	s.mu.Lock()
	s.over = true
	parked := append(s.parked, s.hung...)
	for _, b := range s.blocked {
		parked = append(parked, b.a)
	}
	// They are let go as crashed: together, so none of them may log, check or touch the
	// schedule's state any more (crashed actors return at once).
	for _, a := range parked {
		a.crashed = true
	}
	s.parked, s.hung, s.blocked = nil, nil, nil
	s.mu.Unlock()
	go func() {
		for range s.idle { // actors that end now signal; nobody waits for them
		}
	}()
	for _, a := range append(parked, crashed...) {
		a.wake <- false
	}
	s.wg.Wait()
	close(s.idle)
}
