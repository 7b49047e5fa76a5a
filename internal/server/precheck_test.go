package server

import (
	"encoding/json"
	"testing"
)

// FuzzMessagesTextLen checks that the raw scan of a chat's messages never counts more text
// than renderChat counts once they are decoded, so that precheck refuses no request the
// checks after decoding would take.
func FuzzMessagesTextLen(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"h\u00e9"}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"bc"}]}]}`,
		`{"messages":[{"role":"user","content":"a","Content":"bcd"}]}`,
		`{"messages":[{"role":"assistant","content":null,"reasoning_content":"r"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req chatRequest
		if _, err := decodeJSON(body, &req); err != nil {
			return
		}
		var fields map[string]json.RawMessage
		if json.Unmarshal(body, &fields) != nil {
			return
		}
		decoded := 0
		for i, m := range req.Messages {
			cm, err := convertMessage(i, m)
			if err != nil {
				return // refused anyway
			}
			decoded += messageBytes(cm)
		}
		scanned, spellings := 0, 0
		eachField(fields, "messages", func(raw json.RawMessage) *APIError {
			scanned, spellings = messagesTextLen(raw), spellings+1
			return nil
		})
		if spellings > 1 {
			return // checked on both spellings, where encoding/json keeps the last
		}
		if scanned > decoded {
			t.Fatalf("%s: the raw scan counts %d bytes of text, the decoded messages %d", body, scanned, decoded)
		}
	})
}
