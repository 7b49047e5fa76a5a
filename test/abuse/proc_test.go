//go:build linux

package abuse

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// memoryCap is the resident set at which the watchdog kills a process of the suite: far above
// what any case may cost, it only keeps a case that fails on an unfixed tree (a server that
// would take gigabytes) from taking the machine with it.
const memoryCap = 1 << 30

// memory is a process's resident set and its peak, in bytes, from /proc/PID/status.
type memory struct {
	rss, peak int64
}

// readMemory reads VmRSS and VmHWM of process pid.
func readMemory(pid int) (memory, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memory{}, fmt.Errorf("reading the memory of process %d: %w", pid, err)
	}
	var m memory
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
		if err != nil {
			return memory{}, fmt.Errorf("process %d: %s %q: %w", pid, key, val, err)
		}
		if key == "VmRSS" {
			m.rss = kb << 10
		} else {
			m.peak = kb << 10
		}
	}
	if m.rss == 0 || m.peak == 0 {
		return memory{}, fmt.Errorf("process %d: no VmRSS or VmHWM in /proc/%d/status", pid, pid)
	}
	return m, nil
}

// resetPeak sets process pid's peak resident set (VmHWM) to its current one, so that the next
// readMemory reports the peak since now.
func resetPeak(pid int) error {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		return fmt.Errorf("resetting the peak memory of process %d: %w", pid, err)
	}
	return nil
}

// descendants returns the process ids of pid's children, their children, and so on (a
// server's sandbox workers, say), less the children caught between fork and exec: Go
// starts a child with clone(CLONE_VM|CLONE_VFORK), so until its exec the child runs in its
// parent's address space and reports the parent's whole resident set as its own (the
// server's memory, counted already), with the parent's command line. A sandbox worker the
// server is starting is sampled so now and then.
func descendants(pid int) []int {
	parent, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var out []int
	for _, task := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		for _, f := range strings.Fields(string(b)) {
			child, cerr := strconv.Atoi(f)
			if cerr != nil {
				continue
			}
			if own, oerr := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", child)); err == nil && oerr == nil && bytes.Equal(own, parent) {
				continue // not yet exec'd
			}
			out = append(out, child)
			out = append(out, descendants(child)...)
		}
	}
	return out
}

// descendantsRSS is the resident set of all of pid's descendants.
func descendantsRSS(pid int) int64 {
	var sum int64
	for _, d := range descendants(pid) {
		if m, err := readMemory(d); err == nil {
			sum += m.rss
		}
	}
	return sum
}

// memoryProbe measures what a case costs a server in memory: the growth of its own peak
// resident set (VmHWM, reset at the start) and of its descendants' resident sets, sampled
// every 5 ms (a worker process the server starts, and may kill, counts as its memory).
type memoryProbe struct {
	pid           int
	before        memory
	childrenStart int64
	childrenMax   int64
	stop, done    chan struct{}
}

// startProbe starts measuring process pid.
func startProbe(pid int) (*memoryProbe, error) {
	if err := resetPeak(pid); err != nil {
		return nil, err
	}
	before, err := readMemory(pid)
	if err != nil {
		return nil, err
	}
	p := &memoryProbe{pid: pid, before: before, childrenStart: descendantsRSS(pid), stop: make(chan struct{}), done: make(chan struct{})}
	p.childrenMax = p.childrenStart
	go func() {
		defer close(p.done)
		poll(p.stop, func() bool {
			p.childrenMax = max(p.childrenMax, descendantsRSS(pid))
			return false
		})
	}()
	return p, nil
}

// end stops the probe and returns the extra memory the case cost, and a description of it.
func (p *memoryProbe) end() (int64, string, error) {
	close(p.stop)
	<-p.done
	after, err := readMemory(p.pid)
	if err != nil {
		return 0, "", err
	}
	own, children := after.peak-p.before.rss, p.childrenMax-p.childrenStart
	desc := fmt.Sprintf("%s (peak %s)", mib(own+children), mib(after.peak))
	if children != 0 {
		desc = fmt.Sprintf("%s (the server %s, peak %s; its child processes %s)", mib(own+children), mib(own), mib(after.peak), mib(children))
	}
	return own + children, desc, nil
}

// mib formats a byte count in MiB.
func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// poll calls fn every 5 ms until stop is closed or fn returns true, and reports whether fn
// did.
func poll(stop <-chan struct{}, fn func() bool) bool {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return false
		case <-tick.C:
			if fn() {
				return true
			}
		}
	}
}

// watchdog kills process pid when its resident set passes memoryCap, until stop is closed.
// It sends what it did: "" or why it killed the process.
func watchdog(pid int, stop <-chan struct{}) <-chan string {
	out := make(chan string, 1)
	go func() {
		why := ""
		poll(stop, func() bool {
			m, err := readMemory(pid)
			if err != nil || m.rss <= memoryCap {
				return false
			}
			syscall.Kill(pid, syscall.SIGKILL)
			why = fmt.Sprintf("killed by the suite's watchdog at %s resident", mib(m.rss))
			return true
		})
		out <- why
	}()
	return out
}

// lockedBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// commandResult is how a command that is expected to exit did.
type commandResult struct {
	// exitCode is the exit status; -1 when the process was killed.
	exitCode int
	// output is its standard output and error together.
	output string
	// wall is how long it ran.
	wall time.Duration
	// peak is its peak resident set (from the kernel's rusage).
	peak int64
	// killed says why the suite killed it ("" when it exited by itself).
	killed string
}

// String describes the result for a failure message.
func (r commandResult) String() string {
	s := fmt.Sprintf("exit status %d after %v, peak %s", r.exitCode, r.wall.Round(time.Millisecond), mib(r.peak))
	if r.killed != "" {
		s += ", " + r.killed
	}
	return s + "; output:\n" + tail(r.output, 2000)
}

// runCommand runs the kvasir binary with args and env (added to the suite's environment),
// killing it after timeout, when its memory passes memoryCap, or once it prints serve's
// address line (a command expected to exit with an error that serves instead).
func runCommand(timeout time.Duration, env []string, args ...string) (commandResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, kvasirBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Stdin = strings.NewReader("")
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return commandResult{}, fmt.Errorf("starting kvasir %s: %w", strings.Join(args, " "), err)
	}
	stop := make(chan struct{})
	killed := watchdog(cmd.Process.Pid, stop)
	served := make(chan bool, 1)
	go func() {
		served <- poll(stop, func() bool {
			if !addressLine.MatchString(out.String()) {
				return false
			}
			cmd.Process.Kill()
			return true
		})
	}()
	err := cmd.Wait()
	close(stop)
	r := commandResult{output: out.String(), wall: time.Since(start), killed: <-killed}
	didServe := <-served
	switch {
	case didServe:
		r.killed = "it started serving (killed by the suite)"
	case ctx.Err() != nil:
		r.killed = fmt.Sprintf("killed by the suite after %v", timeout)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.peak = ru.Maxrss << 10
	}
	r.exitCode = cmd.ProcessState.ExitCode()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) && ctx.Err() == nil {
		return r, fmt.Errorf("kvasir %s: %w", strings.Join(args, " "), err)
	}
	return r, nil
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
