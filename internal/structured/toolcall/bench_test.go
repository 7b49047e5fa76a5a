package toolcall

import (
	"strings"
	"testing"
)

// BenchmarkStream streams a Hermes reply with one call of about 8 KB of arguments in
// 4-byte pieces (about a token each), as the server feeds a parser.
func BenchmarkStream(b *testing.B) {
	args := `{"items": [` + strings.Repeat(`{"city": "Paris", "days": 3}, `, 280) + `{}]}`
	text := "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + args + "}\n</tool_call>"
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		p, _ := New(Hermes, Options{NewID: counterIDs()})
		for i := 0; i < len(text); i += 4 {
			p.Feed(text[i:min(i+4, len(text))])
		}
		p.Finish()
		if len(p.Calls()) != 1 || p.Calls()[0].Arguments != args {
			b.Fatalf("calls %+v", p.Calls())
		}
	}
}
