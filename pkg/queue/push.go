package queue

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// PushEnvelope is the JSON body of a Pub/Sub push delivery.
type PushEnvelope struct {
	Message struct {
		Attributes map[string]string `json:"attributes"`
		// Data is the payload; encoding/json decodes the base64 of the envelope.
		Data        []byte    `json:"data"`
		MessageID   string    `json:"messageId"`
		PublishTime time.Time `json:"publishTime"`
	} `json:"message"`
	Subscription string `json:"subscription"`
	// DeliveryAttempt is set where the subscription has a dead-letter policy.
	DeliveryAttempt int `json:"deliveryAttempt"`
}

// MaxPushBody bounds a push envelope: a 10 MB message, base64-encoded, with attributes.
const MaxPushBody = 14 << 20

// DecodePush reads a push envelope from r's body. A body that is not a push envelope is
// an error naming the problem; an envelope whose message is not a runonce message comes
// back as a Delivery with Err set (the caller acks it: it can never be run). Its Ack and
// Nack do nothing: the HTTP answer acks or nacks a push delivery.
func DecodePush(w http.ResponseWriter, r *http.Request) (*Delivery, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxPushBody))
	if err != nil {
		return nil, fmt.Errorf("queue: read push body: %w", err)
	}
	var env PushEnvelope
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("queue: not a Pub/Sub push envelope: %w", err)
	}
	if env.Message.MessageID == "" && env.Message.Attributes == nil {
		return nil, fmt.Errorf("queue: not a Pub/Sub push envelope: no message")
	}
	rec := &Delivery{ID: env.Message.MessageID, DeliveryAttempt: env.DeliveryAttempt, PublishTime: env.Message.PublishTime}
	rec.Message, rec.Err = Decode(env.Message.Attributes, env.Message.Data)
	return rec, nil
}
