package chat

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ardanlabs/jinja"
)

// TestPrepareSource checks the source adaptations directly.
func TestPrepareSource(t *testing.T) {
	tests := []struct{ in, want string }{
		{"a\n", "a"},
		{"a\r\nb\r", "a\nb"},
		{"{% if x %}{{ y }}\n{% endif %}", "{% if x %}\n{{ y }}\n{% endif %}"},
		{"{%- if x -%}{{ y }}", "{%- if x -%}{{ y }}"},
		{"{# c #}{% if %}", "{# c #}\n{% if %}"},
		{"{{ y }}{%- if x %}", "{{ y }} {%- if x %}"},
		{"{{ y }}{{ z }}", "{{ y }}{{ z }}"},
		{"{{ t | tojson }}{{ t|tojson(indent=4) }}{# x|tojson #}", "{{ t | kvasir_tojson }}{{ t|kvasir_tojson(indent=4) }}{# x|tojson #}"},
		{"text |tojson {{ '%}' }}", "text |tojson {{ '%}' }}"},
		{"{% if 'a' %}{ x {{ unclosed", "{% if 'a' %}{ x {{ unclosed"},
	}
	for _, tc := range tests {
		if got := prepareSource(tc.in); got != tc.want {
			t.Errorf("prepareSource(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestPrepareSourceCounters checks where the counting calls go: after every for tag and
// macro tag, before every endmacro tag, nowhere inside a raw block.
func TestPrepareSourceCounters(t *testing.T) {
	tests := []struct{ in, want string }{
		{"{% for m in x %}a{% endfor %}", "{% for m in x %}{{ kvasir_loop() }}a{% endfor %}"},
		{"{%- for m in x -%}\n{{ m }}{%- endfor %}", "{%- for m in x -%}{{ kvasir_loop() }}\n{{ m }} {%- endfor %}"},
		{"{% macro f(a) %}{{ a }}{% endmacro %}", "{% macro f(a) %}{{ kvasir_enter() }}\n{{ a }}{{ kvasir_leave() }}{% endmacro %}"},
		{"{% raw %}{% for x in y %}{% endraw %}", "{% raw %}\n{% for x in y %}\n{% endraw %}"},
		{"{% if format %}{% endif %}", "{% if format %}\n{% endif %}"},
	}
	for _, tc := range tests {
		if got := prepareSource(tc.in); got != tc.want {
			t.Errorf("prepareSource(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestCountersChangeNothing renders every shared template with and without the counting
// calls prepareSource inserts, on the basic and the tool conversation: the prompts (or the
// errors) must be the same.
func TestCountersChangeNothing(t *testing.T) {
	strip := strings.NewReplacer(countIteration, "", enterMacro, "", leaveMacro, "")
	for name, src := range sharedTemplates(t) {
		counted, err := New(src)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		prepared := prepareSource(src)
		plain, err := jinja.Compile(strip.Replace(prepared))
		if err != nil {
			t.Fatalf("%s without counters: %v", name, err)
		}
		uncounted := &Template{tmpl: plain, limits: counted.limits}
		if !strings.Contains(prepared, countIteration) {
			t.Errorf("%s: no loop counted", name)
		}
		for i, in := range comparedInputs() {
			a, aerr := counted.Render(in)
			b, berr := uncounted.Render(in)
			if a != b || fmt.Sprint(aerr) != fmt.Sprint(berr) {
				t.Errorf("%s, input %d: with counters %q (%v), without %q (%v)", name, i, a, aerr, b, berr)
			}
		}
	}
}
