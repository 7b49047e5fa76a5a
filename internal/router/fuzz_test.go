package router

import (
	"bytes"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
)

// FuzzRelay feeds arbitrary bytes to the relay as a backend's event stream, following it
// as an original stream and as a continuation, for completions and chat: it must never
// panic, and when it reports no error the client's stream must end with [DONE].
func FuzzRelay(f *testing.F) {
	f.Add([]byte("data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"text\":\"a\",\"token_ids\":[5]}]}\n\ndata: [DONE]\n\n"), false)
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"token_ids\":[]}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"},\"finish_reason\":\"length\",\"token_ids\":[7,8]}],\"usage\":{\"prompt_tokens\":3}}\n\n"), true)
	f.Add([]byte("data: {\"error\":{\"message\":\"boom\"}}\n\n: comment\nevent: x\ndata: [DONE]\n"), false)
	f.Add([]byte("data: {\"choices\":null}\n\ndata: {\"choices\":[{\"text\":5}]}\n\n"), true)
	r := &Router{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	f.Fuzz(func(t *testing.T, data []byte, chat bool) {
		for _, cont := range []*continuation{nil, {offset: 2, detok: func([]int32) (string, bool) { return string(data), true }}} {
			st := &stream{chat: chat, stripIDs: len(data)%2 == 0, prompt: &promptInfo{tokenIDs: []int32{1, 2}}, body: data}
			w := httptest.NewRecorder()
			err := r.relay(w, bytes.NewReader(data), st, cont)
			out := w.Body.Bytes()
			if err == nil && !bytes.HasSuffix(out, []byte("data: [DONE]\n\n")) {
				t.Fatalf("ended without [DONE]: %q", out)
			}
			st.continuationBody() // any body: an error or a request, never a panic
		}
	})
}
