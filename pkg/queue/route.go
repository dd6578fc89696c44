package queue

import (
	"context"
	"errors"
)

// Route returns a RunPublisher that publishes a message to to when match accepts it and
// to others otherwise: the embedded mode sends its own worker's jobs in process and the
// others to the Pub/Sub a worker in another process joins. Ping checks both.
func Route(match func(*Message) bool, to, others RunPublisher) RunPublisher {
	return route{match, to, others}
}

type route struct {
	match      func(*Message) bool
	to, others RunPublisher
}

func (r route) Publish(ctx context.Context, m *Message) (string, error) {
	if r.match(m) {
		return r.to.Publish(ctx, m)
	}
	return r.others.Publish(ctx, m)
}

func (r route) Ping(ctx context.Context) error {
	return errors.Join(r.to.Ping(ctx), r.others.Ping(ctx))
}
