package toolcall

import "testing"

// streamed is what a parser hands out, gathered: the content, the reasoning, and each call
// as its start and argument pieces build it.
type streamed struct {
	content, reasoning string
	calls              []Call
}

// gather feeds text in the pieces cut says (cut(i) true: a piece ends after byte i) and
// gathers the events, checking each call's events are well formed.
func gather(t testing.TB, name, text string, tools []Tool, cut func(i int) bool) (streamed, []Call) {
	t.Helper()
	p, err := New(name, Options{Tools: tools, NewID: counterIDs()})
	if err != nil {
		t.Fatal(err)
	}
	var out streamed
	take := func(evs []Event) {
		for _, e := range evs {
			switch e.Kind {
			case Content:
				out.content += e.Text
			case Reasoning:
				out.reasoning += e.Text
			case CallStart:
				if e.Index != len(out.calls) {
					t.Fatalf("call start %d after %d calls", e.Index, len(out.calls))
				}
				out.calls = append(out.calls, Call{ID: e.ID, Name: e.Name})
			case CallArgs:
				if e.Index != len(out.calls)-1 {
					t.Fatalf("arguments of call %d while call %d is open", e.Index, len(out.calls)-1)
				}
				out.calls[e.Index].Arguments += e.Text
			}
		}
	}
	start := 0
	for i := range len(text) {
		if cut(i) || i == len(text)-1 {
			take(p.Feed(text[start : i+1]))
			start = i + 1
		}
	}
	take(p.Finish())
	return out, p.Calls()
}

// checkStreamed checks that text fed a byte at a time and fed at once hand out the same, and
// that the events build the calls Calls returns.
func checkStreamed(t testing.TB, name, text string, tools []Tool) {
	t.Helper()
	whole, wholeCalls := gather(t, name, text, tools, func(int) bool { return false })
	bytewise, bytewiseCalls := gather(t, name, text, tools, func(int) bool { return true })
	compareStreams(t, text, whole, wholeCalls, bytewise, bytewiseCalls)
}

// compareStreams fails when two ways of feeding text disagree.
func compareStreams(t testing.TB, text string, a streamed, aCalls []Call, b streamed, bCalls []Call) {
	t.Helper()
	if a.content != b.content || a.reasoning != b.reasoning {
		t.Fatalf("text %q: content %q / reasoning %q at once, %q / %q in pieces", text, a.content, a.reasoning, b.content, b.reasoning)
	}
	if len(aCalls) != len(bCalls) || len(a.calls) != len(aCalls) || len(b.calls) != len(bCalls) {
		t.Fatalf("text %q: calls %+v (events %+v) at once, %+v (events %+v) in pieces", text, aCalls, a.calls, bCalls, b.calls)
	}
	for i := range aCalls {
		if aCalls[i] != bCalls[i] || a.calls[i] != aCalls[i] || b.calls[i] != bCalls[i] {
			t.Fatalf("text %q: call %d: %+v (events %+v) at once, %+v (events %+v) in pieces", text, i, aCalls[i], a.calls[i], bCalls[i], b.calls[i])
		}
	}
}
