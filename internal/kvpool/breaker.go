package kvpool

import (
	"sync"
	"time"
)

// breaker is a circuit breaker over calls to a remote store. Closed, every call goes
// through; after threshold failures in a row it opens, and calls are refused at once
// (costing the caller nothing) until cooldown has passed; then one call goes through
// (half open): its success closes the breaker, its failure opens it for another cooldown.
type breaker struct {
	threshold int
	cooldown  time.Duration
	now       func() time.Time

	mu       sync.Mutex
	failures int       // consecutive failures
	openedAt time.Time // zero: closed
	trial    bool      // a half-open call is out
}

// allow reports whether a call may go out now.
func (b *breaker) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.openedAt.IsZero() {
		return true
	}
	if b.trial || b.now().Sub(b.openedAt) < b.cooldown {
		return false
	}
	b.trial = true
	return true
}

// done records a call's outcome and reports a change of state: opened when this failure
// opened the breaker, closed when this success closed it.
func (b *breaker) done(err error) (opened, closed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	wasOpen := !b.openedAt.IsZero()
	b.trial = false
	if err == nil {
		b.failures = 0
		b.openedAt = time.Time{}
		return false, wasOpen
	}
	b.failures++
	if wasOpen || b.failures >= b.threshold {
		b.openedAt = b.now()
		return !wasOpen, false
	}
	return false, false
}

// isOpen reports whether calls are being refused.
func (b *breaker) isOpen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.openedAt.IsZero()
}
