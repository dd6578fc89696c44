// Package app wires the runonce commands: flags and environment to configuration,
// backends opened by URL, servers and shutdown. The mains in cmd/ only call it, so that
// tests run the same wiring in-process.
package app
