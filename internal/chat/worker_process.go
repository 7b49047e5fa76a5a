package chat

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// errDeadline is the error of a round trip that the deadline ended.
var errDeadline = errors.New("deadline passed")

// sendError is the error of a request the worker did not take: it had died before.
type sendError struct{ err error }

func (e *sendError) Error() string { return "sending: " + e.err.Error() }
func (e *sendError) Unwrap() error { return e.err }

// maxStderrBytes is how much of a worker's standard error is kept: the runtime writes
// the reason of a fatal error first. A worker writes there only as it dies, so the pipe's
// buffer holds it until the parent reads it.
const maxStderrBytes = 4 << 10

// worker is one worker process, seen from its parent. An idle worker costs no goroutine:
// its death is seen by the render that meets it, and its standard error is read then.
type worker struct {
	cmd     *exec.Cmd
	stdin   *os.File
	stdout  *bufio.Reader
	stdoutF *os.File
	stderr  *os.File        // read once it has exited
	maxResp int64           // the largest response frame
	known   map[uint64]bool // the templates it has compiled
	reap    sync.Once
	status  error  // its exit status, once reaped
	errText string // the start of its standard error, once reaped
}

// startWorker starts a worker process running command and hands it its limits.
func startWorker(command []string, limits Limits) (*worker, error) {
	var files [6]*os.File // stdin read, write; stdout read, write; stderr read, write
	for i := 0; i < len(files); i += 2 {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(files[:i])
			return nil, fmt.Errorf("chat template sandbox: %w", err)
		}
		files[i], files[i+1] = r, w
	}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env = append(os.Environ(), WorkerEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = files[0], files[3], files[5]
	w := &worker{cmd: cmd, stdin: files[1], stdout: bufio.NewReader(files[2]), stdoutF: files[2], stderr: files[4],
		maxResp: limits.MaxOutputBytes + 2*maxErrorText + 64, known: map[uint64]bool{}}
	err := cmd.Start()
	closeAll([]*os.File{files[0], files[3], files[5]}) // the child's ends
	if err != nil {
		closeAll([]*os.File{files[1], files[2], files[4]})
		return nil, fmt.Errorf("chat template sandbox: starting a worker (%s): %w", command[0], err)
	}
	resp, err := w.roundTrip(context.Background(), workerStartTimeout, encodeHello(limits))
	if err == nil {
		var tag byte
		if tag, _, err = decodeResponse(resp); err == nil && tag != respOK {
			err = fmt.Errorf("answered the hello with %q", tag)
		}
	}
	if err != nil {
		w.kill()
		return nil, fmt.Errorf("chat template sandbox: starting a worker (%s, which must call chat.ServeWorkerIfAsked first): %w (%v): %s",
			command[0], err, w.status, firstLine(w.errText))
	}
	return w, nil
}

// closeAll closes files.
func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// roundTrip sends the frame made of parts and reads the answer, for up to timeout or
// until ctx ends: then the worker is killed, and the error is errDeadline or ctx's.
func (w *worker) roundTrip(ctx context.Context, timeout time.Duration, parts ...[]byte) ([]byte, error) {
	type result struct {
		resp []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		if err := writeFrame(w.stdin, parts...); err != nil {
			done <- result{nil, &sendError{err}}
			return
		}
		resp, err := readFrame(w.stdout, w.maxResp)
		if err != nil {
			err = fmt.Errorf("reading: %w", err)
		}
		done <- result{resp, err}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.resp, r.err
	case <-timer.C:
		w.kill()
		<-done
		return nil, errDeadline
	case <-ctx.Done():
		w.kill()
		<-done
		return nil, ctx.Err()
	}
}

// kill kills the process and reaps it (once): it waits for its exit, keeps the start of
// its standard error and closes the pipes.
func (w *worker) kill() {
	w.reap.Do(func() {
		w.cmd.Process.Kill()
		w.status = w.cmd.Wait()
		head, _ := io.ReadAll(io.LimitReader(w.stderr, maxStderrBytes))
		w.errText = string(head)
		closeAll([]*os.File{w.stdin, w.stdoutF, w.stderr})
	})
}

// deathCause kills and reaps the worker and returns the limit its standard error names:
// limitStack, LimitMemory, or "" for none.
func (w *worker) deathCause() Limit {
	w.kill()
	switch text := w.errText; {
	case strings.Contains(text, "stack overflow"), strings.Contains(text, "stack exceeds"):
		return limitStack
	case strings.Contains(text, "out of memory"), strings.Contains(text, "cannot allocate memory"),
		strings.Contains(text, "failed to create new OS thread"):
		return LimitMemory
	}
	return ""
}

// firstLine returns the first line of text, "" for none.
func firstLine(text string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(text), "\n")
	return line
}
