package chat

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// newTestSandbox makes a sandbox of this test binary (TestMain serves as its worker),
// closed when the test ends.
func newTestSandbox(t testing.TB, cfg SandboxConfig) *Sandbox {
	t.Helper()
	sb, err := NewSandbox(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	return sb
}

// loadIn loads src into sb.
func loadIn(t testing.TB, sb *Sandbox, src string) *Template {
	t.Helper()
	tmpl, err := sb.Load(context.Background(), src)
	if err != nil {
		t.Fatalf("Load(%q): %v", src, err)
	}
	return tmpl
}

// children returns the ids of this process's child processes, read from /proc.
func children(t testing.TB) []int {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("counting child processes reads /proc")
	}
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // gone since the glob
		}
		// pid (comm) state ppid ...; comm may hold spaces, so read after its last ')'.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(os.Getpid()) {
			pid, _ := strconv.Atoi(strings.Fields(s)[0])
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitDead waits up to 5 s for process pid to have exited with all its threads, and so to
// have closed its files; it is not reaped yet, so its /proc entry stays, a zombie.
func waitDead(t testing.TB, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		state := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
		threads, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if state == "Z" && err == nil && len(threads) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d has not exited: state %s, %d threads", pid, state, len(threads))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitChildren waits up to 5 s for this process to have n children.
func waitChildren(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for got := children(t); len(got) != n; got = children(t) {
		if time.Now().After(deadline) {
			t.Fatalf("%d child processes %v, want %d", len(got), got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSandboxRendersAsInProcess renders every shared template in a sandbox and in this
// process, on the basic and the tool conversation with extra variables of every kind: the
// prompts, or the errors, must be the same.
func TestSandboxRendersAsInProcess(t *testing.T) {
	sb := newTestSandbox(t, SandboxConfig{})
	for name, src := range sharedTemplates(t) {
		local, err := New(src)
		if err != nil {
			t.Fatal(err)
		}
		remote := loadIn(t, sb, src)
		for i, in := range comparedInputs() {
			want, werr := local.Render(in)
			got, gerr := remote.Render(in)
			if got != want || fmt.Sprint(gerr) != fmt.Sprint(werr) {
				t.Errorf("%s, input %d: sandbox %q (%v), in process %q (%v)", name, i, got, gerr, want, werr)
			}
			var lr, rr *RaisedError
			if errors.As(werr, &lr) != errors.As(gerr, &rr) || lr != nil && lr.Message != rr.Message {
				t.Errorf("%s, input %d: raised %v in the sandbox, %v in process", name, i, rr, lr)
			}
		}
	}
}

// hostile are templates that would kill or hang a process rendering them in itself, and
// the limit each must end on. Each has a variant that renders one message and turns
// hostile on two, so that Load accepts it and a request meets it.
var hostile = []struct {
	name, body string
	limits     []Limit // the limits it may end on, the first the one it ends on alone
}{
	{"unbounded recursion", `{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}`, []Limit{LimitDepth}},
	{"a gigabyte string", `{{ 'a' * 1000000000 }}`, []Limit{LimitMemory}},
	// range would build its list of 10^8 before the loop starts: it is refused as the loop
	// limit before a value is made.
	{"range(1e8)", `{% for i in range(100000000) %}{% endfor %}`, []Limit{LimitIterations}},
	{"a billion nested iterations", `{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(1000) %}{% endfor %}{% endfor %}{% endfor %}`, []Limit{LimitIterations}},
	// Few iterations, each a filter over many numbers, in bounded memory: each sum builds a
	// list of as many numbers as the loop limit allows (the limits below hold 20,000).
	{"slow filters", `{% for i in range(1000) %}{{ range(20000) | sum }}{{ range(20000) | join(',') | length }}{% endfor %}`, []Limit{LimitDeadline, LimitMemory, LimitIterations}},
	{"a prompt too long", `{{ 'x' * 5000000 }}`, []Limit{LimitOutput}},
}

// hostileSlack is how long past the deadline a hostile render may end: a worker's start
// and the kill take time on a loaded machine.
const hostileSlack = 2 * time.Second

// wantOneOf fails unless err is a *LimitError on one of limits.
func wantOneOf(t *testing.T, err error, limits []Limit) {
	t.Helper()
	var le *LimitError
	if errors.As(err, &le) && slices.Contains(limits, le.Limit) {
		wantLimit(t, err, le.Limit)
		return
	}
	t.Fatalf("error %v, want one of the limits %v", err, limits)
}

// trojan is body guarded so that it runs only on conversations of two messages or more.
func trojan(body string) string {
	return `{% if messages | length > 1 %}` + body + `{% else %}{{ messages[0].content }}{% endif %}`
}

// TestSandboxHostileTemplates: each hostile template is refused by Load, and its trojan
// variant, accepted, fails the render that meets it, on the limit named, within about the
// deadline (one second); the sandbox then renders on, with no more worker processes than
// it may have, and this process's heap does not grow with what the workers took. (The
// iteration limit is lowered so that a loaded machine meets it before the deadline.)
func TestSandboxHostileTemplates(t *testing.T) {
	sb := newTestSandbox(t, SandboxConfig{Workers: 2, Limits: Limits{MaxIterations: 20_000}})
	good := loadIn(t, sb, `{% for m in messages %}[{{ m.role }}] {{ m.content }}
{% endfor %}`)
	two := Input{Messages: []Message{{Role: "user", Content: "a"}, {Role: "user", Content: "b"}}}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, h := range hostile {
		t.Run(h.name, func(t *testing.T) {
			start := time.Now()
			_, err := sb.Load(context.Background(), h.body)
			wantOneOf(t, err, h.limits)
			if !strings.Contains(err.Error(), "refused") {
				t.Errorf("Load error %q does not say the template is refused", err)
			}
			if d := time.Since(start); d > DefaultTimeout+hostileSlack {
				t.Errorf("Load took %v, want about a second at most", d)
			}
			tmpl := loadIn(t, sb, trojan(h.body))
			start = time.Now()
			_, err = tmpl.Render(two)
			wantOneOf(t, err, h.limits)
			if d := time.Since(start); d > DefaultTimeout+hostileSlack {
				t.Errorf("the render took %v, want about a second at most", d)
			}
			if out, err := good.Render(two); err != nil || out != "[user] a\n[user] b\n" {
				t.Errorf("a good template after it: %q, %v", out, err)
			}
			if n := len(children(t)); n > 2 {
				t.Errorf("%d worker processes, want at most 2", n)
			}
		})
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 50<<20 {
		t.Errorf("this process's heap grew by %d MiB", grown>>20)
	}
}

// TestSandboxStackLimit: with the macro depth count out of the way, unbounded recursion
// ends on the stack limit, which kills the worker, and the next render gets a new one.
func TestSandboxStackLimit(t *testing.T) {
	sb := newTestSandbox(t, SandboxConfig{Workers: 1, Limits: Limits{MaxDepth: 1 << 30, MaxStackBytes: 1 << 20, MaxMemoryBytes: 512 << 20}})
	tmpl := loadIn(t, sb, trojan(hostile[0].body))
	_, err := tmpl.Render(Input{Messages: make([]Message, 2)})
	wantLimit(t, err, LimitDepth)
	if !strings.Contains(err.Error(), "1 MiB of stack") {
		t.Errorf("error %q does not name the stack limit", err)
	}
	if out, err := tmpl.Render(Input{Messages: []Message{{Role: "user", Content: "hi"}}}); err != nil || out != "hi" {
		t.Errorf("after the worker died: %q, %v", out, err)
	}
}

// TestSandboxCancel: a render whose context ends is stopped: it returns the context's
// error at once and its worker is killed.
func TestSandboxCancel(t *testing.T) {
	sb := newTestSandbox(t, SandboxConfig{Workers: 1, Limits: Limits{Timeout: time.Minute, MaxMemoryBytes: 512 << 20, MaxIterations: 1 << 40}})
	tmpl := loadIn(t, sb, trojan(`{{ range(100000000) | join(',') }}`))
	pids := children(t)
	if len(pids) != 1 {
		t.Fatalf("%d workers, want 1", len(pids))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := tmpl.RenderContext(ctx, Input{Messages: make([]Message, 2)})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want the context's", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the cancelled render returned after %v", d)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pids[0])); err == nil {
		t.Errorf("worker %d still runs after its render was cancelled", pids[0])
	}
}

// TestSandboxRestartsKilledWorker: a worker killed from outside while idle is replaced:
// the next render finds it dead before sending, and renders on a new one.
func TestSandboxRestartsKilledWorker(t *testing.T) {
	sb := newTestSandbox(t, SandboxConfig{Workers: 1})
	tmpl := loadIn(t, sb, `{{ messages[0].content }}`)
	in := Input{Messages: []Message{{Role: "user", Content: "hi"}}}
	pids := children(t)
	if len(pids) != 1 {
		t.Fatalf("%d workers, want 1", len(pids))
	}
	p, err := os.FindProcess(pids[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	waitDead(t, pids[0])
	for range 2 {
		if out, err := tmpl.Render(in); err != nil || out != "hi" {
			t.Fatalf("after the kill: %q, %v", out, err)
		}
	}
	if now := children(t); len(now) != 1 || now[0] == pids[0] {
		t.Errorf("workers %v after the restart, want one new one (the killed one was %d)", now, pids[0])
	}
}

// TestSandboxCloseLeavesNothing: after renders on several workers, some killed, Close
// leaves no child process and no goroutine behind, and later renders fail.
func TestSandboxCloseLeavesNothing(t *testing.T) {
	before := runtime.NumGoroutine()
	base := len(children(t))
	sb, err := NewSandbox(SandboxConfig{Workers: 3, Limits: Limits{Timeout: 300 * time.Millisecond, MaxIterations: 1 << 40}})
	if err != nil {
		t.Fatal(err)
	}
	tmpl := loadIn(t, sb, trojan(`{{ range(100000000) | join(',') }}`))
	done := make(chan error, 6)
	for i := range 6 {
		go func() {
			_, err := tmpl.Render(Input{Messages: make([]Message, 1+i%2)})
			done <- err
		}()
	}
	for range 6 {
		<-done
	}
	if n := len(children(t)) - base; n < 1 || n > 3 {
		t.Errorf("%d workers, want 1 to 3", n)
	}
	sb.Close()
	waitChildren(t, base)
	if _, err := tmpl.Render(Input{Messages: make([]Message, 1)}); !errors.Is(err, errClosed) {
		t.Errorf("render after Close: %v, want the sandbox closed", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSandboxNotAWorker: a worker command that does not speak the protocol is an error
// that says what a worker must do.
func TestSandboxNotAWorker(t *testing.T) {
	tr, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true command")
	}
	sb := newTestSandbox(t, SandboxConfig{Command: []string{tr}})
	_, err = sb.Load(context.Background(), "x")
	if err == nil || !strings.Contains(err.Error(), "ServeWorkerIfAsked") {
		t.Fatalf("Load with a worker that exits: %v", err)
	}
}
