package chat

import (
	"errors"
	"math"
	"testing"
)

// TestRangeAsPython: range gives Python's values for each argument form, and a range
// longer than the loop limit is refused as that limit before any list is built.
func TestRangeAsPython(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{`{% for i in range(4) %}{{ i }},{% endfor %}`, "0,1,2,3,"},
		{`{% for i in range(2, 5) %}{{ i }},{% endfor %}`, "2,3,4,"},
		{`{% for i in range(10, 0, -3) %}{{ i }},{% endfor %}`, "10,7,4,1,"},
		{`{% for i in range(1, 8, 3) %}{{ i }},{% endfor %}`, "1,4,7,"},
		{`{% for i in range(5, 2) %}{{ i }},{% endfor %}`, ""},
		{`{{ range(3) | length }}`, "3"},
	} {
		tpl, err := New(c.src)
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		got, err := tpl.Render(Input{})
		if err != nil || got != c.want {
			t.Errorf("%s: %q, %v; want %q", c.src, got, err, c.want)
		}
	}
	for _, src := range []string{`{% for i in range(100000000) %}{% endfor %}`, `{{ range(-9223372036854775808, 9223372036854775807) | length }}`} {
		tpl, err := New(src)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tpl.Render(Input{})
		var limit *LimitError
		if !errors.As(err, &limit) || limit.Limit != LimitIterations {
			t.Errorf("%s: %v, want the loop-iterations limit", src, err)
		}
	}
	for _, src := range []string{`{{ range(1, 2, 0) }}`, `{{ range() }}`, `{{ range('a') }}`} {
		tpl, err := New(src)
		if err != nil {
			continue // refused at compile time is as good
		}
		if _, err := tpl.Render(Input{}); err == nil {
			t.Errorf("%s: rendered, want an error", src)
		}
	}
}

// TestRangeLen: the count of range's values without overflow, at the extremes too.
func TestRangeLen(t *testing.T) {
	for _, c := range []struct {
		start, stop, step int64
		want              uint64
	}{
		{0, 10, 1, 10}, {0, 10, 3, 4}, {10, 0, -3, 4}, {0, 0, 1, 0}, {5, 1, 1, 0}, {1, 5, -1, 0},
		{math.MinInt64, math.MaxInt64, 1, math.MaxUint64}, {math.MaxInt64, math.MinInt64, math.MinInt64, 2},
	} {
		if got := rangeLen(c.start, c.stop, c.step); got != c.want {
			t.Errorf("rangeLen(%d, %d, %d) = %d, want %d", c.start, c.stop, c.step, got, c.want)
		}
	}
}
