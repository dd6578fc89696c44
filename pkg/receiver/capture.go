package receiver

import (
	"bytes"
	"net/http"
)

// capture passes a handler's response through to the client and keeps a copy of what
// the receiver stores: the status, the headers it keeps as they were when the status
// was written, and the body up to a limit.
type capture struct {
	w       http.ResponseWriter
	keep    []string // canonical header names to keep
	limit   int
	status  int // 0 until the status is written
	header  http.Header
	body    bytes.Buffer
	omitted bool // the body went past limit
}

func (c *capture) Header() http.Header { return c.w.Header() }

func (c *capture) WriteHeader(code int) {
	if c.status != 0 {
		c.w.WriteHeader(code) // net/http logs the superfluous call, as it would unwrapped
		return
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		c.w.WriteHeader(code) // informational: not the response
		return
	}
	c.status = code
	c.header = make(http.Header, len(c.keep))
	for _, k := range c.keep {
		if v := c.w.Header().Values(k); len(v) > 0 {
			c.header[k] = append([]string(nil), v...)
		}
	}
	c.w.WriteHeader(code)
}

func (c *capture) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	if !c.omitted {
		if c.body.Len()+len(p) > c.limit {
			c.omitted = true
			c.body = bytes.Buffer{}
		} else {
			c.body.Write(p)
		}
	}
	return c.w.Write(p)
}

// Flush flushes the client's response when its writer can.
func (c *capture) Flush() {
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	http.NewResponseController(c.w).Flush() //nolint:errcheck // as http.Flusher: no error to report
}

// Unwrap lets http.ResponseController reach the client's writer.
func (c *capture) Unwrap() http.ResponseWriter { return c.w }

// response is what the receiver stores of the handler's answer.
func (c *capture) response() *Response {
	status := c.status
	if status == 0 {
		status = http.StatusOK // a handler that wrote nothing answered 200, empty
	}
	r := &Response{Status: status, Header: c.header, BodyOmitted: c.omitted}
	if r.Header == nil {
		r.Header = http.Header{}
	}
	if !c.omitted {
		r.Body = bytes.Clone(c.body.Bytes())
	}
	return r
}
