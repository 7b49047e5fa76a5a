package chat

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// WorkerEnv is the environment variable that makes a process a sandbox worker: a Sandbox
// starts its workers with it set, and ServeWorkerIfAsked then serves renders.
const WorkerEnv = "KVASIR_CHAT_SANDBOX_WORKER"

// maxErrorText bounds an error text a worker sends back.
const maxErrorText = 4 << 10

// maxHelloBytes bounds the hello frame.
const maxHelloBytes = 256

// workerProcs is the GOMAXPROCS of a worker: one render at a time, and room for the
// collector and the goroutine that watches standard input.
const workerProcs = 2

// ServeWorkerIfAsked makes this process a sandbox worker when WorkerEnv is set: it renders
// the templates its parent sends on standard input, answers on standard output, and exits
// when standard input closes; it never returns then. Otherwise it returns at once. A binary
// whose Sandbox starts workers from its own executable (the default) must call it first
// thing in main, and a test binary in TestMain.
func ServeWorkerIfAsked() {
	if os.Getenv(WorkerEnv) == "" {
		return
	}
	os.Exit(serveWorker(os.Stdin, os.Stdout))
}

// serveWorker is a worker's life: the hello, its limits set on this process, then one
// response per render request. It exits the process when in closes, even mid-render.
func serveWorker(in io.Reader, out io.Writer) int {
	r := bufio.NewReader(in)
	b, err := readFrame(r, maxHelloBytes)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandbox worker: reading the hello: %v\n", err)
		return 2
	}
	limits, err := decodeHello(b)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := limitWorker(limits); err != nil {
		fmt.Fprintf(os.Stderr, "sandbox worker: %v\n", err)
		return 2
	}
	if err := writeFrame(out, encodeResponse(respOK, "")); err != nil {
		return 2
	}
	requests := make(chan []byte)
	go func() {
		for {
			b, err := readFrame(r, limits.MaxMemoryBytes)
			if err != nil {
				// The parent closed the pipe or went away: stop now, even mid-render.
				if !errors.Is(err, io.EOF) {
					fmt.Fprintf(os.Stderr, "sandbox worker: reading a request: %v\n", err)
				}
				os.Exit(0)
			}
			requests <- b
		}
	}()
	w := &workerState{limits: limits, templates: map[uint64]*Template{}}
	for b := range requests {
		if err := writeFrame(out, w.handle(b)); err != nil {
			return 2
		}
	}
	return 0
}

// limitWorker sets this worker's stack, memory and thread limits. A stack beyond
// MaxStackBytes and memory beyond the address-space limit are fatal to the process, which
// its parent reads from the first line of its standard error.
func limitWorker(l Limits) error {
	debug.SetTraceback("none")
	runtime.GOMAXPROCS(workerProcs)
	debug.SetMaxStack(int(min(l.MaxStackBytes, int64(^uint(0)>>1))))
	debug.SetMemoryLimit(l.MaxMemoryBytes)
	go watchHeap(l.MaxMemoryBytes)
	// A stack grows by copying to one twice its size, so the old and the new are both held;
	// the runtime reserves address space ahead of use (heap arenas of 64 MiB), so the
	// address space has room for that beyond the memory limit: a single allocation larger
	// than both fails at once, with nothing touched, and the heap watch stops what grows.
	if raceEnabled {
		return nil
	}
	return limitAddressSpace(l.MaxMemoryBytes + 3*l.MaxStackBytes + addressSlack)
}

// addressSlack is the address space a worker may reserve beyond its memory and stack
// limits, for the runtime's own reservations.
const addressSlack = 192 << 20

// heapWatchEvery is how often watchHeap looks at the heap.
const heapWatchEvery = time.Millisecond

// watchHeap ends the worker as soon as its heap holds more than limit bytes (a render that
// grows a value step by step), telling its parent it ran out of memory.
func watchHeap(limit int64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	for range time.Tick(heapWatchEvery) {
		metrics.Read(sample)
		if v := sample[0].Value; v.Kind() == metrics.KindUint64 && int64(v.Uint64()) > limit {
			fmt.Fprintf(os.Stderr, "sandbox worker: out of memory: the heap holds %d bytes, over the limit of %d\n", v.Uint64(), limit)
			os.Exit(3)
		}
	}
}

// workerState is what a worker keeps between requests.
type workerState struct {
	limits    Limits
	templates map[uint64]*Template // compiled, by the parent's id
}

// handle answers one render request.
func (w *workerState) handle(b []byte) []byte {
	req, err := decodeRender(b)
	if err != nil {
		return encodeResponse(respError, clip(err.Error()))
	}
	t := w.templates[req.id]
	if req.hasSource {
		var ce *CompileError
		if t, err = compile(req.source, w.limits); errors.As(err, &ce) {
			return encodeResponse(respCompile, clip(ce.Err.Error()))
		}
		w.templates[req.id] = t
	}
	if t == nil {
		return encodeResponse(respError, fmt.Sprintf("sandbox worker: no template %d", req.id))
	}
	out, err := t.renderValues(req.data, func() time.Time { return req.now })
	var limit *LimitError
	var raised *RaisedError
	switch {
	case errors.As(err, &limit):
		return encodeResponse(respLimit, string(limit.Limit))
	case errors.As(err, &raised):
		return encodeResponse(respRaised, clip(err.Error()), clip(raised.Message))
	case err != nil:
		return encodeResponse(respError, clip(err.Error()))
	}
	return encodeResponse(respOK, out)
}

// clip shortens s to maxErrorText bytes.
func clip(s string) string {
	if len(s) > maxErrorText {
		return s[:maxErrorText] + "..."
	}
	return s
}
