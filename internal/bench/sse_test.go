package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestParseSSELine(t *testing.T) {
	for _, c := range []struct {
		line  string
		kind  SSEKind
		field string
		data  string
	}{
		{"\n", SSEBlank, "", ""},
		{"\r\n", SSEBlank, "", ""},
		{"", SSEBlank, "", ""},
		{": ping\n", SSEComment, "", " ping"},
		{"data: {\"a\":1}\n", SSEData, "", `{"a":1}`},
		{"data:{\"a\":1}\r\n", SSEData, "", `{"a":1}`},
		{"data:  two spaces\n", SSEData, "", " two spaces"},
		{"data\n", SSEData, "", ""},
		{"data: [DONE]\n", SSEDone, "", "[DONE]"},
		{"data:[DONE]", SSEDone, "", "[DONE]"},
		{"event: error\n", SSEField, "event", "error"},
		{"id:7\n", SSEField, "id", "7"},
		{"retry\n", SSEField, "retry", ""},
		{"datum: x\n", SSEField, "datum", "x"},
		{"data: a: b\n", SSEData, "", "a: b"},
	} {
		l := ParseSSELine([]byte(c.line))
		if l.Kind != c.kind || l.Field != c.field || string(l.Data) != c.data {
			t.Errorf("ParseSSELine(%q) = {%v %q %q}, want {%v %q %q}", c.line, l.Kind, l.Field, l.Data, c.kind, c.field, c.data)
		}
	}
}

func FuzzParseSSELine(f *testing.F) {
	for _, s := range []string{"data: {\"choices\":[]}\n", "data: [DONE]\n", ": ping\n", "event: x\r\n", "\n", "data:", "::", "data:\xff\xfe"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		l := ParseSSELine(line)
		trimmed := bytes.TrimRight(line, "\r\n")
		if !bytes.Contains(trimmed, l.Data) {
			t.Fatalf("data %q is not part of the line %q", l.Data, line)
		}
		switch {
		case len(trimmed) == 0:
			if l.Kind != SSEBlank {
				t.Fatalf("%q: kind %v, want blank", line, l.Kind)
			}
		case trimmed[0] == ':':
			if l.Kind != SSEComment {
				t.Fatalf("%q: kind %v, want comment", line, l.Kind)
			}
		case bytes.HasPrefix(trimmed, []byte("data:")):
			if l.Kind != SSEData && l.Kind != SSEDone {
				t.Fatalf("%q: kind %v, want data", line, l.Kind)
			}
			// "data: X" gives X back exactly.
			want := bytes.TrimPrefix(bytes.TrimPrefix(trimmed, []byte("data:")), []byte(" "))
			if !bytes.Equal(l.Data, want) {
				t.Fatalf("%q: data %q, want %q", line, l.Data, want)
			}
		default:
			if l.Kind != SSEField && l.Kind != SSEData {
				t.Fatalf("%q: kind %v", line, l.Kind)
			}
		}
	})
}

// readStream runs the stream reader over body and returns its state.
func readStream(chat bool, body string) (*streamState, error) {
	now := time.Now()
	s := &streamState{chat: chat, start: now, last: now}
	err := s.read(strings.NewReader(body))
	return s, err
}

func TestStreamRead(t *testing.T) {
	for _, c := range []struct {
		name, body string
		chat       bool
		chunks     int
		text       string
		usage      int
		err        string
	}{
		{name: "openai", body: "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"text\":\"b\",\"finish_reason\":\"length\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n",
			chunks: 2, text: "ab", usage: 2},
		{name: "no blank lines", body: "data: {\"choices\":[{\"text\":\"a\"}]}\ndata: {\"choices\":[{\"text\":\"b\"}]}\n", chunks: 2, text: "ab"},
		{name: "CRLF and comments", body: ": ping\r\n\r\ndata:{\"choices\":[{\"text\":\"x\"}]}\r\n\r\n", chunks: 1, text: "x"},
		{name: "multi-line data", body: "data: {\"choices\":\ndata: [{\"text\":\"m\"}]}\n\n", chunks: 1, text: "m"},
		{name: "special token with empty text", body: "data: {\"choices\":[{\"text\":\"\"}]}\n\ndata: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"stop\"}]}\n\n", chunks: 1},
		{name: "chat role chunk", chat: true, body: "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"reasoning_content\":\"r\"}}]}\n\ndata: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
			chunks: 2, text: "hir"},
		{name: "no trailing newline", body: "data: {\"choices\":[{\"text\":\"z\"}]}", chunks: 1, text: "z"},
		{name: "stops at DONE", body: "data: [DONE]\n\ndata: {\"choices\":[{\"text\":\"late\"}]}\n\n", chunks: 0},
		{name: "error event", body: "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"error\":{\"message\":\"out of blocks\"}}\n\n", chunks: 1, text: "a", err: "out of blocks"},
		{name: "bad JSON", body: "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {oops\n\n", chunks: 1, text: "a", err: "bad chunk"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := readStream(c.chat, c.body)
			if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Fatalf("error %v, want %q", err, c.err)
			}
			if s.chunks != c.chunks || s.text.String() != c.text || s.usageTokens != c.usage || len(s.itl) != max(0, c.chunks-1) {
				t.Errorf("chunks %d text %q usage %d gaps %d; want %d %q %d", s.chunks, s.text.String(), s.usageTokens, len(s.itl), c.chunks, c.text, c.usage)
			}
		})
	}
}

func FuzzStreamRead(f *testing.F) {
	f.Add("data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]\n\n")
	f.Add("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n: x\n\ndata: {\"usage\":{\"completion_tokens\":5}}\n")
	f.Add("data: {\"error\":\"boom\"}\n\n")
	f.Add("data: {\ndata: }\n\n")
	f.Fuzz(func(t *testing.T, body string) {
		s, _ := readStream(false, body)
		if s.chunks < 0 || len(s.itl) != max(0, s.chunks-1) {
			t.Fatalf("%d chunks but %d gaps", s.chunks, len(s.itl))
		}
	})
}

func TestErrorMessage(t *testing.T) {
	for in, want := range map[string]string{
		`{"error":{"message":"bad max_tokens","type":"invalid_request_error"}}`: "bad max_tokens",
		`{"error":"plain"}`:      "plain",
		`{"message":"flat"}`:     "flat",
		"<html>nope</html>":      "<html>nope</html>",
		strings.Repeat("x", 400): strings.Repeat("x", 300) + "...",
	} {
		if got := errorMessage([]byte(in)); got != want {
			t.Errorf("errorMessage(%.40q) = %.40q, want %.40q", in, got, want)
		}
	}
}
