package chat

import (
	"fmt"
	"time"
)

// The defaults of Limits.
const (
	// DefaultMaxDepth is how deep macro calls may nest. Python's Jinja2 under its default
	// recursion limit of 1000 frames stops at a few hundred, so no template that works under
	// transformers comes near it.
	DefaultMaxDepth = 500
	// DefaultMaxIterations is how many for-loop iterations one render may run, all loops
	// together: real templates take a few per message, so a conversation of thousands of
	// messages with tools stays far below it, and the engine runs it in about 0.2 s.
	DefaultMaxIterations = 200_000
	// DefaultMaxOutputBytes is the longest rendered prompt: a 128k-token conversation
	// renders to well under 1 MiB.
	DefaultMaxOutputBytes = 4 << 20
	// DefaultMaxStackBytes bounds the render's stack in the sandbox: about 3,000 nested
	// macro calls, or expressions nested as deep.
	DefaultMaxStackBytes = 8 << 20
	// DefaultMaxMemoryBytes bounds the heap of a sandbox worker: room for the longest
	// output several times over, and little enough that a template that only grows (a
	// list of 10^8 numbers) costs the server less than 50 MB before it is stopped. The
	// heap is checked every millisecond, so a growing list overshoots the bound by up to a
	// doubling of its backing array on a busy machine: measured 35-52 MiB of resident set at
	// 40 MiB, hence 32.
	DefaultMaxMemoryBytes = 32 << 20
	// DefaultTimeout is the render deadline in the sandbox.
	DefaultTimeout = time.Second
)

// Limits bound what one render may cost. The depth, iteration and output limits hold for
// every template; the stack, memory and deadline limits only in a Sandbox, since a Go
// goroutine can be neither stopped nor kept from a fatal stack overflow. Zero fields take
// the defaults above.
type Limits struct {
	// MaxDepth is how deep macro calls may nest.
	MaxDepth int
	// MaxIterations is how many for-loop iterations one render may run, all loops together.
	// Loops inside filters (join, map, a string repeated) are not counted: the memory limit
	// and the deadline bound those.
	MaxIterations int64
	// MaxOutputBytes is the longest rendered text.
	MaxOutputBytes int64
	// MaxStackBytes is the largest stack a render may grow in a sandbox worker; beyond it
	// the worker dies and the render fails on the recursion depth limit.
	MaxStackBytes int64
	// MaxMemoryBytes is how much memory a sandbox worker may take beyond what it holds at
	// start (its heap soft limit, and its hard address-space limit where the system has one).
	MaxMemoryBytes int64
	// Timeout is the render deadline in a sandbox: the worker is killed when it passes.
	Timeout time.Duration
}

// Check reports a negative limit, naming it.
func (l Limits) Check() error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"MaxDepth", int64(l.MaxDepth)}, {"MaxIterations", l.MaxIterations}, {"MaxOutputBytes", l.MaxOutputBytes},
		{"MaxStackBytes", l.MaxStackBytes}, {"MaxMemoryBytes", l.MaxMemoryBytes}, {"Timeout", int64(l.Timeout)},
	} {
		if f.v < 0 {
			return fmt.Errorf("chat template limits: %s must not be negative, got %d", f.name, f.v)
		}
	}
	return nil
}

// withDefaults returns l with its zero fields set to the defaults.
func (l Limits) withDefaults() Limits {
	if l.MaxDepth == 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.MaxIterations == 0 {
		l.MaxIterations = DefaultMaxIterations
	}
	if l.MaxOutputBytes == 0 {
		l.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if l.MaxStackBytes == 0 {
		l.MaxStackBytes = DefaultMaxStackBytes
	}
	if l.MaxMemoryBytes == 0 {
		l.MaxMemoryBytes = DefaultMaxMemoryBytes
	}
	if l.Timeout == 0 {
		l.Timeout = DefaultTimeout
	}
	return l
}

// Limit names one of the limits a render may exceed.
type Limit string

// The limits a LimitError names.
const (
	LimitDepth      Limit = "recursion depth"
	LimitIterations Limit = "loop iterations"
	LimitOutput     Limit = "output size"
	LimitMemory     Limit = "memory"
	LimitDeadline   Limit = "render deadline"
	// limitStack is LimitDepth reached by the stack rather than the macro count.
	limitStack Limit = "stack"
)

// LimitError is the error of a render that exceeded one of its Limits. The template, not
// the server, is at fault.
type LimitError struct {
	// Limit is the limit exceeded.
	Limit Limit
	// Max is its value as configured, in words ("500", "16 MiB", "1s").
	Max string
}

// Error says which limit the render exceeded.
func (e *LimitError) Error() string {
	if e.Limit == LimitDeadline {
		return fmt.Sprintf("chat template: rendering passed the %s (%s)", e.Limit, e.Max)
	}
	return fmt.Sprintf("chat template: rendering exceeded the %s limit (%s)", e.Limit, e.Max)
}

// limitError builds the LimitError of the limit which under l.
func (l Limits) limitError(which Limit) *LimitError {
	var max string
	switch which {
	case LimitDepth:
		max = fmt.Sprintf("%d nested macro calls", l.MaxDepth)
	case limitStack:
		which, max = LimitDepth, bytesText(l.MaxStackBytes)+" of stack"
	case LimitIterations:
		max = fmt.Sprint(l.MaxIterations)
	case LimitOutput:
		max = bytesText(l.MaxOutputBytes)
	case LimitMemory:
		max = bytesText(l.MaxMemoryBytes)
	case LimitDeadline:
		max = l.Timeout.String()
	}
	return &LimitError{Limit: which, Max: max}
}

// bytesText writes n bytes in the largest binary unit that divides it.
func bytesText(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d %s", n/u.size, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}
