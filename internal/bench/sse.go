package bench

import (
	"bytes"
)

// SSEKind says what one line of a server-sent event stream holds.
type SSEKind int

const (
	// SSEBlank is an empty line: the end of an event.
	SSEBlank SSEKind = iota
	// SSEComment is a line starting with ':' (servers send them as keep-alive pings).
	SSEComment
	// SSEData is a "data:" line; its payload is in SSELine.Data.
	SSEData
	// SSEDone is the OpenAI end-of-stream marker "data: [DONE]".
	SSEDone
	// SSEField is any other field line ("event:", "id:", "retry:", or an unknown name);
	// its name and value are in SSELine.Field and SSELine.Data.
	SSEField
)

// SSELine is one parsed line of a text/event-stream body.
type SSELine struct {
	Kind SSEKind
	// Field is the field name for SSEField lines ("event", "id", ...).
	Field string
	// Data is the value after the colon (one leading space removed), without the line end.
	Data []byte
}

// ParseSSELine parses one line of an event stream as the HTML standard describes it:
// "name: value" with one optional space after the colon, a line of only a name meaning an
// empty value, and lines starting with ':' being comments. The line may end in "\n",
// "\r\n" or nothing. Data aliases line.
func ParseSSELine(line []byte) SSELine {
	line = bytes.TrimRight(line, "\r\n")
	if len(line) == 0 {
		return SSELine{Kind: SSEBlank}
	}
	if line[0] == ':' {
		return SSELine{Kind: SSEComment, Data: line[1:]}
	}
	name, value, found := bytes.Cut(line, []byte(":"))
	if !found {
		value = nil
	} else if len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	if string(name) != "data" {
		return SSELine{Kind: SSEField, Field: string(name), Data: value}
	}
	if string(bytes.TrimSpace(value)) == "[DONE]" {
		return SSELine{Kind: SSEDone, Data: value}
	}
	return SSELine{Kind: SSEData, Data: value}
}
