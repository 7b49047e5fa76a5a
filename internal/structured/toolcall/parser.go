// Package toolcall parses the tool calls a chat model writes into its output, in the syntax
// of the model's family (Hermes' <tool_call>{json}</tool_call>, Mistral's [TOOL_CALLS], ...),
// into OpenAI's tool_calls.
//
// A Parser is incremental: it is fed the text as it is detokenized and returns Events:
// content deltas outside calls, the start of each call (index, id, name) and its arguments
// in pieces, as OpenAI streams tool_calls[i].function.arguments. Text is held back only
// while it may still open a call (a prefix of a marker); text that looks like a call start
// but turns out not to be one comes back as content. Feeding the text in any pieces yields
// the same content, calls and arguments as feeding it at once.
//
// Every family is a format: the markers that open a region of calls in the content, and a
// function that parses the region's text so far into the calls it holds. The Parser re-reads
// a region as it grows and hands out what is new, so a format only says what a prefix of
// its syntax means, and says it the same way for every longer prefix.
package toolcall

import (
	"crypto/rand"
	"strings"
)

// Kind is the kind of an Event.
type Kind int

const (
	// Content is text outside tool calls.
	Content Kind = iota
	// Reasoning is thinking text the format separates from the answer (gpt-oss analysis).
	Reasoning
	// CallStart opens call Index with its ID and Name.
	CallStart
	// CallArgs is a piece of the arguments of call Index (JSON text, in order).
	CallArgs
)

// Event is one thing a Parser hands out.
type Event struct {
	Kind Kind
	// Text is the content, reasoning or arguments piece.
	Text string
	// Index is the call's position among the output's calls (CallStart, CallArgs).
	Index int
	// ID and Name identify the call (CallStart).
	ID, Name string
}

// Call is one complete tool call.
type Call struct {
	// ID identifies the call: the model's own where its syntax has one, else a new one.
	ID string
	// Name is the function's name.
	Name string
	// Arguments is the JSON text of the arguments ("{}" when the model gave none).
	Arguments string
}

// Tool is what a parser may know of a callable function: formats that write arguments as
// text (Qwen3-Coder, GLM) read a parameter as a string when its schema says so.
type Tool struct {
	// Name is the function's name.
	Name string
	// Parameters is the JSON Schema of its arguments (may be nil).
	Parameters map[string]any
}

// Options configure a Parser.
type Options struct {
	// Tools are the request's functions (optional).
	Tools []Tool
	// NewID makes the id of a call whose syntax carries none (nil: a random "call_..." id,
	// or the 9 letters and digits Mistral's templates require).
	NewID func() string
}

// region is what a format reads from a region's text so far. A longer prefix of the same
// text must read as an extension: the same calls with the same names and ids, arguments
// and content that extend the shorter prefix's.
type region struct {
	// calls are the calls begun so far; a call with an empty name is not begun.
	calls []partialCall
	// done: the region ends after end bytes; what follows is content again.
	done bool
	end  int
	// reject: the marker does not open a region after all; it is content.
	reject bool
	// pass, with done: the text after the region is a message body of its own kind up to
	// one of its ends (harmony's channels, functionary's "all"), handed out as it comes.
	pass *passage
}

// passage is a run of text handed out as one kind until one of its ends.
type passage struct {
	kind Kind
	ends []string
	// keep is the end that is not consumed: it opens the next region.
	keep string
}

// partialCall is a call as far as the region's text goes.
type partialCall struct {
	id, name, args string
}

// format is one family's tool-call syntax.
type format struct {
	// markers open a region anywhere in the content.
	markers []string
	// atStart: a region opens at the very start of the output too (the prompt ended with the
	// marker, or the format writes calls bare).
	atStart bool
	// read reads a region's text, which starts with its marker; final says no more follows.
	read func(text string, final bool, rd *reader) region
	// newID makes ids for calls whose syntax carries none (nil: randomID).
	newID func() string
}

// Parser parses one output's tool calls incrementally. It is not safe for concurrent use.
type Parser struct {
	f     *format
	rd    *reader
	newID func() string

	buf      string // content held back, or the open region's text
	inRegion bool
	// afterCalls: a region of calls has just closed, so whitespace that only separates it
	// from the next region or the end of the output is dropped.
	afterCalls bool
	pass       *passage // the passage being handed out, if any
	marker     int      // the open region's marker length
	started    bool     // any text has been taken
	finished   bool
	sent       regionSent
	calls      []Call
	openCalls  []Call // the open region's calls begun so far
}

// regionSent is what the open region has handed out: how much of each call's arguments.
type regionSent struct {
	args []int
}

// newParser makes a parser for f.
func newParser(f *format, opt Options) *Parser {
	p := &Parser{f: f, rd: &reader{tools: newToolTypes(opt.Tools)}, newID: opt.NewID}
	if p.newID == nil {
		p.newID = f.newID
	}
	if p.newID == nil {
		p.newID = randomID
	}
	return p
}

// Feed takes the next piece of output text and returns what it completes.
func (p *Parser) Feed(delta string) []Event {
	if p.finished || delta == "" {
		return nil
	}
	p.buf += delta
	return p.advance(false)
}

// Finish says the output has ended and returns what was still held back: a region left
// open is read as the end of the output leaves it.
func (p *Parser) Finish() []Event {
	if p.finished {
		return nil
	}
	evs := p.advance(true)
	p.finished = true
	return evs
}

// Calls returns the complete calls, in order (all of them once Finish has been called).
func (p *Parser) Calls() []Call { return p.calls }

// advance hands out what the buffered text settles: the text is in a passage, in content,
// or in a region, and each step either moves on (a passage or region ended, a region
// opened) or waits for more text.
func (p *Parser) advance(final bool) []Event {
	var evs []Event
	for {
		var again bool
		switch {
		case p.pass != nil:
			evs, again = p.advancePassage(evs, final)
		case p.inRegion:
			evs, again = p.advanceRegion(evs, final)
		default:
			evs, again = p.advanceContent(evs, final)
		}
		if !again {
			return evs
		}
	}
}

// advancePassage hands out the passage's text up to its end, or all but what may start
// the end.
func (p *Parser) advancePassage(evs []Event, final bool) ([]Event, bool) {
	k, m := firstMarker(p.buf, p.pass.ends)
	if k < 0 {
		k = len(p.buf)
		if !final {
			k -= heldPrefix(p.buf, p.pass.ends)
		}
	}
	if k > 0 {
		evs = append(evs, Event{Kind: p.pass.kind, Text: p.buf[:k]})
	}
	if m == "" {
		p.buf = p.buf[k:]
		if final {
			p.pass = nil
		}
		return evs, final
	}
	if m != p.pass.keep {
		k += len(m)
	}
	p.buf, p.pass = p.buf[k:], nil
	return evs, true
}

// advanceContent hands out content up to the first marker, which opens a region, or all but
// what may start a marker.
func (p *Parser) advanceContent(evs []Event, final bool) ([]Event, bool) {
	if !p.started && p.f.atStart {
		p.started = true
		p.openRegion(0)
		return evs, true
	}
	if p.buf == "" {
		return evs, false
	}
	p.started = true
	if p.afterCalls {
		rest := strings.TrimLeft(p.buf, " \t\r\n")
		if !final && heldPrefix(rest, p.f.markers) == len(rest) {
			return evs, false // whitespace, or whitespace and what may open a region
		}
		if i, _ := firstMarker(rest, p.f.markers); i == 0 || rest == "" {
			p.buf = rest
		}
		p.afterCalls = false
		return evs, true
	}
	i, m := firstMarker(p.buf, p.f.markers)
	if i >= 0 {
		evs = contentEvent(evs, p.buf[:i])
		p.buf = p.buf[i:]
		p.openRegion(len(m))
		return evs, true
	}
	keep := 0
	if !final {
		keep = heldPrefix(p.buf, p.f.markers)
	}
	evs = contentEvent(evs, p.buf[:len(p.buf)-keep])
	p.buf = p.buf[len(p.buf)-keep:]
	return evs, false
}

// advanceRegion reads the open region and hands out what is new; a region that ends (or
// the output's end) closes it, a rejected one gives its marker back as content.
func (p *Parser) advanceRegion(evs []Event, final bool) ([]Event, bool) {
	r := p.f.read(p.buf, final, p.rd)
	if r.reject && p.sentNothing() {
		p.inRegion = false
		evs = contentEvent(evs, p.buf[:p.marker])
		p.buf = p.buf[p.marker:]
		return evs, true
	}
	evs = p.diff(r, evs)
	if !r.done && !final {
		return evs, false
	}
	end := len(p.buf)
	if r.done && r.end <= end {
		end = max(r.end, p.marker) // a region takes its marker at least
	}
	if n := len(p.openCalls); n > 0 {
		evs = p.closeArgs(n-1, evs)
	}
	p.calls = append(p.calls, p.openCalls...)
	p.afterCalls = len(p.openCalls) > 0
	p.buf = p.buf[end:]
	p.inRegion = false
	if r.done {
		p.pass = r.pass
	}
	return evs, true
}

// contentEvent appends a Content event of s, unless s is empty.
func contentEvent(evs []Event, s string) []Event {
	if s == "" {
		return evs
	}
	return append(evs, Event{Kind: Content, Text: s})
}

// openRegion starts a region at the head of buf whose marker is n bytes long.
func (p *Parser) openRegion(n int) {
	p.inRegion = true
	p.marker = n
	p.rd.forget()
	p.sent = regionSent{}
	p.openCalls = nil
}

// sentNothing reports whether the open region has handed nothing out yet.
func (p *Parser) sentNothing() bool {
	return len(p.sent.args) == 0
}

// diff appends the events that take the open region from what it has sent to r.
func (p *Parser) diff(r region, evs []Event) []Event {
	for i, c := range r.calls {
		if c.name == "" {
			break
		}
		index := len(p.calls) + i
		if i == len(p.sent.args) {
			if i > 0 {
				evs = p.closeArgs(i-1, evs) // a call is complete once the next begins
			}
			id := c.id
			if id == "" {
				id = p.newID()
			}
			p.openCalls = append(p.openCalls, Call{ID: id, Name: c.name})
			p.sent.args = append(p.sent.args, 0)
			evs = append(evs, Event{Kind: CallStart, Index: index, ID: id, Name: c.name})
		}
		if n := len(c.args); n > p.sent.args[i] && strings.HasPrefix(c.args, p.openCalls[i].Arguments) {
			evs = append(evs, Event{Kind: CallArgs, Index: index, Text: c.args[p.sent.args[i]:]})
			p.sent.args[i] = n
			p.openCalls[i].Arguments = c.args
		}
	}
	return evs
}

// closeArgs gives open call k, now complete, "{}" for arguments when it had none.
func (p *Parser) closeArgs(k int, evs []Event) []Event {
	if p.openCalls[k].Arguments != "" {
		return evs
	}
	p.openCalls[k].Arguments = "{}"
	return append(evs, Event{Kind: CallArgs, Index: len(p.calls) + k, Text: "{}"})
}

// firstMarker returns the earliest position of any marker in s and that marker (the longest
// at that position), or -1.
func firstMarker(s string, markers []string) (int, string) {
	best, which := -1, ""
	for _, m := range markers {
		i := strings.Index(s, m)
		if i >= 0 && (best < 0 || i < best || i == best && len(m) > len(which)) {
			best, which = i, m
		}
	}
	return best, which
}

// heldPrefix is the length of the longest tail of s that is a proper prefix of a marker:
// the text that may yet open a region.
func heldPrefix(s string, markers []string) int {
	keep := 0
	for _, m := range markers {
		for n := min(len(m)-1, len(s)); n > keep; n-- {
			if strings.HasSuffix(s, m[:n]) {
				keep = n
				break
			}
		}
	}
	return keep
}

// randomID returns an OpenAI-style call id: "call_" and 24 letters and digits.
func randomID() string { return "call_" + randomAlnum(24) }

// mistralID returns the 9 letters and digits Mistral's templates require of a call id.
func mistralID() string { return randomAlnum(9) }

// randomAlnum returns n random letters and digits.
func randomAlnum(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
