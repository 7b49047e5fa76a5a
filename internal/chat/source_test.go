package chat

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ardanlabs/jinja"
	"github.com/kvasir-llm/kvasir/internal/testdata"
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
	dir := testdata.Path(t, "chat_templates")
	files, err := filepath.Glob(filepath.Join(dir, "*.jinja"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no templates in %s: %v", dir, err)
	}
	inputs := []Input{
		{Messages: basicConversation(), AddGenerationPrompt: true, BOSToken: "<s>", EOSToken: "</s>", Now: fixedNow},
		{Messages: toolConversation(), Tools: []map[string]any{weatherTool()}, AddGenerationPrompt: true, Now: fixedNow},
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		counted, err := New(string(src))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		plain, err := jinja.Compile(strip.Replace(prepareSource(string(src))))
		if err != nil {
			t.Fatalf("%s without counters: %v", f, err)
		}
		uncounted := &Template{tmpl: plain, limits: counted.limits}
		if strings.Count(prepareSource(string(src)), "kvasir_") == strings.Count(strip.Replace(prepareSource(string(src))), "kvasir_") {
			t.Errorf("%s: no counter inserted", filepath.Base(f))
		}
		for i, in := range inputs {
			a, aerr := counted.Render(in)
			b, berr := uncounted.Render(in)
			if a != b || fmt.Sprint(aerr) != fmt.Sprint(berr) {
				t.Errorf("%s, input %d: with counters %q (%v), without %q (%v)", filepath.Base(f), i, a, aerr, b, berr)
			}
		}
	}
}
