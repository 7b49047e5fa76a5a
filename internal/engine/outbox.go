package engine

import (
	"context"
	"sync"
)

// outbox carries one request's outputs from the engine loop to its consumer without ever
// blocking the loop: outputs queue in a slice and a pump goroutine forwards them.
type outbox struct {
	mu     sync.Mutex
	items  []Output
	closed bool
	signal chan struct{} // capacity 1: "something new"
}

func newOutbox() *outbox { return &outbox{signal: make(chan struct{}, 1)} }

// push queues an output (engine loop).
func (o *outbox) push(out Output) {
	o.mu.Lock()
	o.items = append(o.items, out)
	o.mu.Unlock()
	o.notify()
}

// close marks the end of the stream (engine loop); nothing may be pushed after it.
func (o *outbox) close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	o.notify()
}

func (o *outbox) notify() {
	select {
	case o.signal <- struct{}{}:
	default:
	}
}

// take returns the queued outputs and whether the stream has ended.
func (o *outbox) take() ([]Output, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	items := o.items
	o.items = nil
	return items, o.closed
}

// pump forwards the outbox to ch until the stream ends, then closes ch. When ctx is
// cancelled it calls abort once and stops delivering (the consumer is gone), but keeps
// draining until the engine closes the stream so that nothing leaks.
func (o *outbox) pump(ctx context.Context, ch chan<- Output, abort func()) {
	defer close(ch)
	done := ctx.Done()
	cancelled := false
	cancel := func() {
		if !cancelled {
			cancelled = true
			done = nil
			abort()
		}
	}
	for {
		select {
		case <-o.signal:
		case <-done:
			cancel()
			continue
		}
		items, closed := o.take()
		for _, it := range items {
			if cancelled {
				break
			}
			select {
			case ch <- it:
			case <-done:
				cancel()
			}
		}
		if closed {
			return
		}
	}
}
