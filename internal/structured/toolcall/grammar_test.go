package toolcall

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/structured"
)

// grammarTools are two functions: one with typed, required arguments, one with none.
var grammarTools = []Function{
	{Name: "get_weather", Parameters: json.RawMessage(`{"type": "object", "properties": {
		"city": {"type": "string", "maxLength": 20}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
		"required": ["city", "days"]}`)},
	{Name: "now"},
}

// TestGrammarCalls: for each family with a grammar, the grammar admits replies making
// valid calls (and the family's parser reads them back as those calls), and refuses an
// unknown function, a missing or mistyped argument, an extra key, text around the calls,
// too many calls, and calls of another function than the one named.
func TestGrammarCalls(t *testing.T) {
	weather := `{"name":"get_weather","ARGS":{"city":"Oslo","days":3}}`
	now := `{"name":"now","ARGS":{}}`
	hermes := func(calls []string) string {
		var b strings.Builder
		for i, c := range calls {
			if i > 0 {
				b.WriteString("\n")
			}
			b.WriteString("<tool_call>\n" + c + "\n</tool_call>")
		}
		return b.String()
	}
	array := func(prefix string) func([]string) string {
		return func(calls []string) string { return prefix + "[" + strings.Join(calls, ",") + "]" }
	}
	for _, c := range []struct {
		parser, key string
		wrap        func(calls []string) string // a reply making these calls
		parallel    bool                        // the family writes several calls in one reply
		head        string                      // what a call object begins with, for {"name":
	}{
		{Hermes, "arguments", hermes, true, ""},
		{Llama3JSON, "parameters", func(calls []string) string { return strings.Join(calls, ";") }, false, ""},
		{Mistral, "arguments", array("[TOOL_CALLS]"), true, ""},
		{Granite, "arguments", array("<|tool_call|>"), true, ""},
		{CommandR, "parameters", func(calls []string) string { return "Action:\n```json\n[" + strings.Join(calls, ",") + "]\n```" }, true, `{"tool_name":`},
		{CommandR7B, "parameters", func(calls []string) string { return "<|START_ACTION|>[" + strings.Join(calls, ",") + "]<|END_ACTION|>" }, true,
			`{"tool_call_id":"12","tool_name":`},
	} {
		t.Run(c.parser, func(t *testing.T) {
			w, n := strings.ReplaceAll(weather, "ARGS", c.key), strings.ReplaceAll(now, "ARGS", c.key)
			if c.head != "" {
				w, n = strings.Replace(w, `{"name":`, c.head, 1), strings.Replace(n, `{"name":`, c.head, 1)
			}
			one := func(call string) string { return c.wrap([]string{call}) }
			compile := func(fn string, parallel bool) *structured.Compiled {
				src, err := Grammar(c.parser, grammarTools, fn, parallel)
				if err != nil {
					t.Fatal(err)
				}
				g, err := structured.ParseGBNF(src)
				if err != nil {
					t.Fatalf("%v\n%s", err, src)
				}
				cg, err := structured.Compile(g, structured.DefaultLimits())
				if err != nil {
					t.Fatal(err)
				}
				return cg
			}
			single := compile("", false)
			for _, ok := range []string{one(w), one(n)} {
				if !single.Matches(ok) {
					t.Errorf("refused %q", ok)
				}
				p, _ := New(c.parser, Options{})
				p.Feed(ok)
				p.Finish()
				calls := p.Calls()
				if len(calls) != 1 || !strings.Contains(ok, `"`+calls[0].Name+`"`) || !json.Valid([]byte(calls[0].Arguments)) {
					t.Errorf("%q parsed as %+v", ok, calls)
				}
			}
			for _, bad := range []string{
				one(strings.Replace(w, "get_weather", "get_time", 1)),
				one(strings.Replace(w, `,"days":3`, "", 1)),
				one(strings.Replace(w, `"days":3`, `"days":"3"`, 1)),
				one(strings.Replace(w, `"days":3`, `"days":9`, 1)),
				one(strings.Replace(w, `"days":3}`, `"days":3,"x":1}`, 1)),
				"Sure. " + one(w),
				c.wrap([]string{w, n}),
			} {
				if single.Matches(bad) {
					t.Errorf("admitted %q", bad)
				}
			}
			if strings.Contains(c.head, `"12"`) {
				for _, id := range []string{"", "x", "1234567"} { // Command R7B's count: 1 to 6 digits
					if bad := one(strings.Replace(w, `"12"`, `"`+id+`"`, 1)); single.Matches(bad) {
						t.Errorf("admitted %q", bad)
					}
				}
			}
			if c.parallel {
				many := compile("", true)
				calls := []string{w}
				for range MaxParallelCalls - 1 {
					calls = append(calls, n)
				}
				if !many.Matches(c.wrap(calls[:2])) || !many.Matches(c.wrap(calls)) {
					t.Errorf("parallel: refused %q", c.wrap(calls))
				}
				if many.Matches(c.wrap(append(calls, n))) {
					t.Errorf("parallel: admitted %d calls", MaxParallelCalls+1)
				}
			}
			named := compile("now", false)
			if named.Matches(one(w)) || !named.Matches(one(n)) {
				t.Errorf("named function: wrong language")
			}
		})
	}
	if _, err := Grammar("nonsense", grammarTools, "", false); err == nil || !strings.Contains(err.Error(), "nonsense") {
		t.Errorf("an unknown parser: %v, want an error naming it", err)
	}
	if _, err := Grammar(Hermes, grammarTools, "missing", false); err == nil {
		t.Error("a named function that is not a tool was accepted")
	}
}

// TestTriggersBeginEveryReply: each family's triggers are prefixes of its grammar's
// replies (a lazy grammar refuses any other), the families with a mark have one, and a
// reply's text before its calls does not hold a trigger by accident of the grammar.
func TestTriggersBeginEveryReply(t *testing.T) {
	for _, parser := range Names() {
		triggers := Triggers(parser)
		if parser == FunctionaryV32 {
			if triggers != nil {
				t.Errorf("%s: triggers %q, want none (its calls carry no mark)", parser, triggers)
			}
			continue
		}
		if len(triggers) == 0 {
			t.Errorf("%s: no trigger", parser)
			continue
		}
		src, err := Grammar(parser, grammarTools, "", true)
		if err != nil {
			t.Fatalf("%s: %v", parser, err)
		}
		g, err := structured.ParseGBNF(src)
		if err != nil {
			t.Fatalf("%s: %v", parser, err)
		}
		c, err := structured.Compile(g, structured.DefaultLimits())
		if err != nil {
			t.Fatalf("%s: %v", parser, err)
		}
		for _, trig := range triggers {
			if !c.NewMatcher().AcceptString(trig) {
				t.Errorf("%s: the grammar's replies do not begin with the trigger %q", parser, trig)
			}
		}
		if c.NewMatcher().AcceptString("Sure, " + triggers[0]) {
			t.Errorf("%s: the grammar admits text before the trigger", parser)
		}
	}
}
