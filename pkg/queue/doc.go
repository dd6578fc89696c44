// Package queue carries runs from the ingress to the workers over Google Cloud Pub/Sub
// (cloud.google.com/go/pubsub/v2): the publisher the ingress waits on before it answers,
// the subscriber and push handler the workers receive from, the message format both
// share. Two packages of their own, which only a program that runs them links, serve
// the embedded mode (-dev) and the tests: pubsubtest, an in-process Pub/Sub server
// (pstest) for fast tests and for workers that join the embedded mode from another
// process, and memqueue, an in-process transport with Pub/Sub's delivery contract for
// the embedded mode's own worker.
//
// Delivery is at least once. A message carries the run's identity (its data the payload,
// its attributes the rest); the ledger decides whether the run still needs work, so
// duplicates and redeliveries are harmless. A Delivery is one delivery, pulled by a
// Subscriber or decoded from a push by DecodePush; RunPublisher is what publishes runs,
// the ingress's and the rescuer's alike.
//
// # Publishing
//
// Publisher.Publish returns only once Pub/Sub has stored the message (or failed, with an
// error wrapping ErrUnavailable), so a caller that answers after it never acknowledges
// a run that was not enqueued. Publishers use LatencyPublishSettings (a 1 ms delay
// threshold) unless told otherwise. Topics are opened as pubsub://PROJECT/TOPIC; the
// client honours PUBSUB_EMULATOR_HOST. Package pubsubtest runs the client library's pstest
// server in the process (a package of its own, so that what links queue does not link
// the fake), with EnsureTopic and EnsureSubscription working against it, the emulator
// and Pub/Sub alike.
//
// # In process
//
// A memqueue.Topic's Publisher is a RunPublisher and its Subscriber yields the same
// *Delivery as a Subscriber, so the ingress and the worker have one code path: at-least-
// once delivery, redelivery after a nack or once a delivery outlives MaxExtension, a late
// ack ignored, no ordering, a retention.
// It has no network and no gRPC: pstest delivers a few hundred messages a second in
// process, a memqueue.Topic as many as the ledger can take. Its messages are lost on exit.
package queue
