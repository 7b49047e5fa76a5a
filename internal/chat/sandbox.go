package chat

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ardanlabs/jinja"
)

// DefaultWorkers is how many sandbox workers may render at once.
const DefaultWorkers = 4

// workerStartTimeout bounds a worker's start and hello.
const workerStartTimeout = 10 * time.Second

// SandboxConfig configures a Sandbox. Zero values pick defaults.
type SandboxConfig struct {
	// Limits bound each render.
	Limits Limits
	// Workers is how many worker processes may render at once (0: DefaultWorkers); more
	// renders wait for one to be free.
	Workers int
	// Command is the worker's command line (nil: this process's own executable). The
	// program must call ServeWorkerIfAsked before anything else.
	Command []string
}

// Sandbox renders chat templates in worker processes, so that a template that recurses
// without end, asks for gigabytes or loops for ever costs one worker (killed, and replaced)
// and not the process that asked: a render past the deadline, or whose context ends, is
// killed; one that overflows its stack or its memory dies. Each ends in a *LimitError
// naming the limit. The first Load starts the first worker and then, in the background,
// the others up to Workers; they are kept for the next render and replaced in the
// background when one dies, so that the pool's processes (and their memory) are there
// from the start and never grow with the load. It is safe for concurrent
// use; Close stops the workers.
type Sandbox struct {
	limits  Limits
	command []string
	slots   chan struct{} // one per live or starting worker
	idle    chan *worker
	done    chan struct{} // closed by Close
	nextID  atomic.Uint64
	mu      sync.Mutex
	closed  bool
	live    map[*worker]struct{}
	starts  sync.WaitGroup // background replacements
}

// errClosed is the error of a render on a closed sandbox.
var errClosed = errors.New("chat template sandbox: closed")

// NewSandbox makes a sandbox; it starts no worker until the first Load.
func NewSandbox(cfg SandboxConfig) (*Sandbox, error) {
	if err := cfg.Limits.Check(); err != nil {
		return nil, err
	}
	if cfg.Workers < 0 {
		return nil, fmt.Errorf("chat template sandbox: workers must not be negative, got %d", cfg.Workers)
	}
	if cfg.Workers == 0 {
		cfg.Workers = DefaultWorkers
	}
	command := cfg.Command
	if len(command) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("chat template sandbox: finding this executable: %w", err)
		}
		command = []string{exe}
	}
	return &Sandbox{
		limits:  cfg.Limits.withDefaults(),
		command: command,
		slots:   make(chan struct{}, cfg.Workers),
		idle:    make(chan *worker, cfg.Workers),
		done:    make(chan struct{}),
		live:    map[*worker]struct{}{},
	}, nil
}

// Limits returns the limits of every render, defaults filled in.
func (s *Sandbox) Limits() Limits { return s.limits }

// trivialConversation is what Load renders to try a template.
var trivialConversation = Input{Messages: []Message{{Role: "user", Content: "Hello"}}, AddGenerationPrompt: true}

// Load compiles source in a worker and tries it on a one-message conversation, returning
// the template that renders in this sandbox. A template that does not compile is a
// *CompileError; one that cannot render the conversation within the limits (or that kills
// its worker) is refused with the reason. An error the template itself raises on it, or
// any other render error, is left for the requests to meet.
func (s *Sandbox) Load(ctx context.Context, source string) (*Template, error) {
	t := &Template{limits: s.limits, src: source, sb: s, id: s.nextID.Add(1)}
	_, err := t.RenderContext(ctx, trivialConversation)
	s.fill()
	var ce *CompileError
	var re *remoteError
	switch {
	case err == nil, errors.As(err, &re):
		return t, nil
	case errors.As(err, &ce):
		return nil, err
	}
	return nil, fmt.Errorf("chat template refused: it cannot render a one-message conversation within the limits: %w", err)
}

// Close stops every worker, killing those still rendering (their renders fail), and waits
// for them to exit.
func (s *Sandbox) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	live := make([]*worker, 0, len(s.live))
	for w := range s.live {
		live = append(live, w)
	}
	s.mu.Unlock()
	for _, w := range live {
		w.kill()
	}
	s.starts.Wait()
	return nil
}

// render renders the variables data with t in a worker, killing it when the deadline
// passes or ctx ends.
func (s *Sandbox) render(ctx context.Context, t *Template, data map[string]jinja.Value, now time.Time) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	body := encoder{}
	if err := body.variables(data); err != nil {
		return "", err
	}
	if int64(len(body.buf)) > s.limits.MaxMemoryBytes {
		return "", s.limits.limitError(LimitMemory)
	}
	w, resp, err := s.send(ctx, t, now, body.buf)
	if err != nil {
		if w == nil {
			return "", err
		}
		s.discard(w)
		switch {
		case s.isClosed():
			return "", errClosed
		case errors.Is(err, errDeadline):
			return "", s.limits.limitError(LimitDeadline)
		case ctx.Err() != nil:
			return "", fmt.Errorf("chat template: %w", ctx.Err())
		}
		return "", s.deathError(w, err)
	}
	tag, texts, err := decodeResponse(resp)
	if err != nil {
		s.discard(w)
		return "", err
	}
	w.known[t.id] = tag != respCompile
	s.release(w)
	switch tag {
	case respRaised:
		return "", &remoteError{text: texts[0], cause: &RaisedError{Message: texts[1]}}
	case respError:
		return "", &remoteError{text: texts[0]}
	case respCompile:
		return "", &CompileError{Err: errors.New(texts[0])}
	case respLimit:
		switch l := Limit(texts[0]); l {
		case LimitDepth, LimitIterations, LimitOutput:
			return "", s.limits.limitError(l)
		}
		return "", fmt.Errorf("sandbox worker: unknown limit %q", texts[0])
	}
	return texts[0], nil
}

// send sends a render request to a worker and returns the worker and its answer. A worker
// found dead before it took the request (one that died idle) is replaced and the request
// sent again, once. On an error the worker, if not nil, is to be discarded.
func (s *Sandbox) send(ctx context.Context, t *Template, now time.Time, body []byte) (*worker, []byte, error) {
	for attempt := 0; ; attempt++ {
		w, err := s.acquire(ctx)
		if err != nil {
			return nil, nil, err
		}
		var source *string
		if !w.known[t.id] {
			source = &t.src
		}
		resp, err := w.roundTrip(ctx, s.limits.Timeout, encodeRenderHead(t.id, source, now), body)
		var se *sendError
		if attempt == 0 && errors.As(err, &se) {
			s.discard(w)
			continue
		}
		return w, resp, err
	}
}

// remoteError is an error of the template that a worker reported (not a limit): its text
// as the worker wrote it, and the typed error it wrapped, if any.
type remoteError struct {
	text  string
	cause error
}

func (e *remoteError) Error() string { return e.text }
func (e *remoteError) Unwrap() error { return e.cause }

// acquire returns an idle worker, or starts one when fewer than Workers live, or waits.
func (s *Sandbox) acquire(ctx context.Context) (*worker, error) {
	select {
	case w := <-s.idle:
		return w, nil
	default:
	}
	select {
	case w := <-s.idle:
		return w, nil
	case s.slots <- struct{}{}:
		w, err := s.start()
		if err != nil {
			<-s.slots
			return nil, err
		}
		return w, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("chat template: waiting for a sandbox worker: %w", ctx.Err())
	case <-s.done:
		return nil, errClosed
	}
}

// isClosed reports whether Close was called.
func (s *Sandbox) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// start starts a worker in a slot already taken.
func (s *Sandbox) start() (*worker, error) {
	if s.isClosed() {
		return nil, errClosed
	}
	w, err := startWorker(s.command, s.limits)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		w.kill()
		return nil, errClosed
	}
	s.live[w] = struct{}{}
	return w, nil
}

// release gives a worker back after a render.
func (s *Sandbox) release(w *worker) {
	if s.isClosed() {
		s.discard(w)
		return
	}
	s.idle <- w // never blocks: idle holds as many as there are slots
}

// discard kills a worker, frees its slot and starts a replacement in the background, so
// that the next render finds one warm.
func (s *Sandbox) discard(w *worker) {
	w.kill()
	s.mu.Lock()
	delete(s.live, w)
	s.mu.Unlock()
	<-s.slots
	s.fill()
}

// fill starts workers in the background into every free slot (none once closed).
func (s *Sandbox) fill() {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		select {
		case s.slots <- struct{}{}:
		default:
			s.mu.Unlock()
			return // every slot is taken: no worker is missing
		}
		s.starts.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.starts.Done()
			w, err := s.start()
			if err != nil {
				<-s.slots
				return // the next render starts one and reports the error
			}
			s.release(w)
		}()
	}
}

// deathError is the error of a render whose worker died (err is what the pipe said): the
// limit its standard error names, or the death itself.
func (s *Sandbox) deathError(w *worker, err error) error {
	switch w.deathCause() {
	case limitStack:
		return s.limits.limitError(limitStack)
	case LimitMemory:
		return s.limits.limitError(LimitMemory)
	}
	return &workerError{err: err, status: w.status, stderr: firstLine(w.errText)}
}

// workerError is the death of a worker for no limit known.
type workerError struct {
	err    error  // what the pipe said
	status error  // the exit status
	stderr string // the first line it wrote
}

func (e *workerError) Error() string {
	return fmt.Sprintf("chat template sandbox: the worker died (%v, %v): %s", e.err, e.status, e.stderr)
}
