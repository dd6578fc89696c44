package queue

import (
	"context"
	"fmt"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// EnsureTopic creates topicID in the client's project unless it exists, and returns
// its full name. It works against Pub/Sub, the emulator and pubsubtest.InProcess alike.
func EnsureTopic(ctx context.Context, c *pubsub.Client, topicID string) (string, error) {
	name := fmt.Sprintf("projects/%s/topics/%s", c.Project(), topicID)
	_, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: name})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return "", fmt.Errorf("queue: create topic %s: %w", name, err)
	}
	return name, nil
}

// EnsureSubscription creates subID on topicID unless it exists, and returns its full
// name. sub, when non-nil, is the template (ack deadline, retry policy, dead letter
// policy, push config…); its Name and Topic are set here.
func EnsureSubscription(ctx context.Context, c *pubsub.Client, topicID, subID string, sub *pubsubpb.Subscription) (string, error) {
	req := &pubsubpb.Subscription{}
	if sub != nil {
		req = proto.Clone(sub).(*pubsubpb.Subscription)
	}
	req.Name = fmt.Sprintf("projects/%s/subscriptions/%s", c.Project(), subID)
	req.Topic = fmt.Sprintf("projects/%s/topics/%s", c.Project(), topicID)
	_, err := c.SubscriptionAdminClient.CreateSubscription(ctx, req)
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return "", fmt.Errorf("queue: create subscription %s on %s: %w", req.Name, req.Topic, err)
	}
	return req.Name, nil
}
