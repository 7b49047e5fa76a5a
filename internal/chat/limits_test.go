package chat

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// renderWith compiles src in this process under limits and renders an empty conversation.
func renderWith(t *testing.T, src string, limits Limits) (string, error) {
	t.Helper()
	tmpl, err := compile(src, limits.withDefaults())
	if err != nil {
		t.Fatalf("compile %q: %v", src, err)
	}
	return tmpl.Render(Input{})
}

// wantLimit fails unless err is a *LimitError on limit.
func wantLimit(t *testing.T, err error, limit Limit) {
	t.Helper()
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != limit {
		t.Fatalf("error %v, want the %s limit", err, limit)
	}
	if !strings.Contains(err.Error(), string(limit)) {
		t.Errorf("error %q does not name the %s limit", err, limit)
	}
}

// TestLoopIterationsCounted: for-loop iterations of all loops together, nested or one
// after the other, are counted up to MaxIterations and refused beyond.
func TestLoopIterationsCounted(t *testing.T) {
	limits := Limits{MaxIterations: 100}
	// 10 + 10*9 = 100 iterations: at the limit.
	at := `{% for i in range(10) %}{% for j in range(9) %}{% endfor %}{% endfor %}ok`
	if out, err := renderWith(t, at, limits); err != nil || out != "ok" {
		t.Fatalf("100 iterations: %q, %v", out, err)
	}
	// One more loop of one iteration: 101.
	_, err := renderWith(t, at+`{% for k in [1] %}{% endfor %}`, limits)
	wantLimit(t, err, LimitIterations)
	// A loop inside a macro called from a loop counts too: 20 + 20*5 = 120.
	_, err = renderWith(t, `{% macro m() %}{% for i in range(5) %}{% endfor %}{% endmacro %}{% for i in range(20) %}{{ m() }}{% endfor %}`, limits)
	wantLimit(t, err, LimitIterations)
	// A billion iterations end at the limit, not after them.
	_, err = renderWith(t, `{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(1000) %}{% endfor %}{% endfor %}{% endfor %}`, limits)
	wantLimit(t, err, LimitIterations)
}

// TestMacroDepthCounted: macro calls may nest MaxDepth deep; one level more is refused,
// and unbounded recursion ends there.
func TestMacroDepthCounted(t *testing.T) {
	limits := Limits{MaxDepth: 50}
	nested := func(n int) string {
		return fmt.Sprintf(`{%% macro f(n) %%}{%% if n > 1 %%}{{ f(n - 1) }}{%% endif %%}x{%% endmacro %%}{{ f(%d) }}`, n)
	}
	if out, err := renderWith(t, nested(50), limits); err != nil || out != strings.Repeat("x", 50) {
		t.Fatalf("50 levels: %q, %v", out, err)
	}
	_, err := renderWith(t, nested(51), limits)
	wantLimit(t, err, LimitDepth)
	_, err = renderWith(t, `{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}`, limits)
	wantLimit(t, err, LimitDepth)
	// Depth is nesting, not calls: 200 calls one after the other never nest.
	if _, err := renderWith(t, `{% macro g() %}y{% endmacro %}{% for i in range(200) %}{{ g() }}{% endfor %}`, limits); err != nil {
		t.Fatalf("200 calls in a row: %v", err)
	}
}

// TestOutputSizeLimit: the rendered text may be MaxOutputBytes long, no longer.
func TestOutputSizeLimit(t *testing.T) {
	limits := Limits{MaxOutputBytes: 1000}
	if out, err := renderWith(t, `{{ 'ab' * 500 }}`, limits); err != nil || len(out) != 1000 {
		t.Fatalf("1000 bytes: %d bytes, %v", len(out), err)
	}
	_, err := renderWith(t, `{{ 'ab' * 500 }}!`, limits)
	wantLimit(t, err, LimitOutput)
}

// TestCountersAreReserved: the counters' names cannot be set from Input.Extra, so a
// request cannot replace them.
func TestCountersAreReserved(t *testing.T) {
	tmpl, err := New(`{% for m in messages %}{{ m.content }}{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{loopFunc, enterFunc, leaveFunc} {
		if _, err := tmpl.Render(Input{Extra: map[string]any{name: "x"}}); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Extra %q: error %v, want it refused", name, err)
		}
	}
}

// TestLimitsCheck: a negative limit is an error naming it; zero takes the default.
func TestLimitsCheck(t *testing.T) {
	for _, l := range []Limits{{MaxDepth: -1}, {MaxIterations: -1}, {MaxOutputBytes: -1}, {MaxStackBytes: -1}, {MaxMemoryBytes: -1}, {Timeout: -1}} {
		if err := l.Check(); err == nil {
			t.Errorf("%+v: no error", l)
		}
	}
	if err := (Limits{}).Check(); err != nil {
		t.Errorf("zero limits: %v", err)
	}
	if d := (Limits{}).withDefaults(); d.MaxDepth != 500 || d.MaxIterations != 200_000 || d.MaxOutputBytes != 4<<20 ||
		d.MaxStackBytes != 8<<20 || d.MaxMemoryBytes != 32<<20 || d.Timeout.Seconds() != 1 {
		t.Errorf("defaults %+v", d)
	}
}
