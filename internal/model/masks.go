package model

import "fmt"

// MaskFunc returns the vocabulary masks of a step's logits rows: nil (no row masked), or
// one entry per row of the step's LogitsIndices, in order, each nil (every token allowed)
// or a mask of backend.MaskWords(vocabulary) words (bit t%32 of word t/32 allows token t).
// The forward calls it once per step, on the calling goroutine, after the step's layers
// have been queued and before the logits op, so that the host computes the masks while a
// device runs the layers. Its error fails the step (the keys and values of the step's
// tokens are already written).
type MaskFunc func() ([][]uint32, error)

// maskError is the failure of a step's MaskFunc.
type maskError struct{ err error }

func (e *maskError) Error() string { return "vocabulary masks: " + e.err.Error() }

func (e *maskError) Unwrap() error { return e.err }

// maskRelay hands a split model's step masks from the calling goroutine, which calls the
// MaskFunc, to the logits rank's goroutine, which needs them between its layers and its
// logits op: the rank signals ready once its first micro-batch with logits rows has its
// layers queued, waits for done, and takes each micro-batch's rows of masks.
type maskRelay struct {
	fn      MaskFunc
	ready   chan struct{} // closed by the logits rank
	done    chan struct{} // closed by the caller once masks and err are set
	signals bool          // ready is closed
	masks   [][]uint32
	err     error
}

// newMaskRelay returns a relay for fn, or nil when fn is nil.
func newMaskRelay(fn MaskFunc) *maskRelay {
	if fn == nil {
		return nil
	}
	return &maskRelay{fn: fn, ready: make(chan struct{}), done: make(chan struct{})}
}

// rows returns the MaskFunc the logits rank calls for the n rows from row from (nil when
// the relay is).
func (r *maskRelay) rows(from, n int) MaskFunc {
	if r == nil {
		return nil
	}
	return func() ([][]uint32, error) {
		if !r.signals {
			r.signals = true
			close(r.ready)
		}
		<-r.done
		if r.err != nil || r.masks == nil {
			return nil, r.err
		}
		return r.masks[from : from+n], nil
	}
}

// serve calls the MaskFunc on the calling goroutine when the logits rank asks, unless the
// ranks finish first (finished closed) without asking: a rank failed.
func (r *maskRelay) serve(finished <-chan struct{}, rows int) {
	if r == nil {
		return
	}
	select {
	case <-r.ready:
		r.masks, r.err = r.fn()
		if r.err == nil && r.masks != nil && len(r.masks) != rows {
			r.err = fmt.Errorf("%d masks for %d logits rows", len(r.masks), rows)
		}
		close(r.done)
	case <-finished:
	}
}
