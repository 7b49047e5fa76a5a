package server

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir"
)

// TestKVEventsAndHashes checks the two router endpoints against each other: the hashes
// /v1/kv_hashes gives a prompt are the ones /v1/kv_events reports stored once the prompt
// has run, a stale or foreign epoch gets a snapshot of the same set, and a chat request
// is hashed as its rendered prompt.
func TestKVEventsAndHashes(t *testing.T) {
	ev := NewKVEvents(8)
	env := newTestEnv(t, kvasir.Options{OnKVEvent: ev.Record}, Config{KVEvents: ev})
	prompt := strings.Repeat("the quick brown fox jumps over the lazy dog ", 4)
	body := map[string]any{"prompt": prompt, "max_tokens": 1, "temperature": 0}
	var hs kvHashesResponse
	env.post(t, "/v1/kv_hashes/completions", body, &hs)
	if hs.BlockSize != 16 || len(hs.Prompts) != 1 || len(hs.Prompts[0].Hashes) != hs.Prompts[0].NumTokens/16 || len(hs.Prompts[0].Hashes) < 2 {
		t.Fatalf("hashes response %+v", hs)
	}
	var first kvEventsResponse
	if code, b := env.do(t, http.MethodGet, "/v1/kv_events", nil); code != 200 || json.Unmarshal(b, &first) != nil || !first.Snapshot || len(first.Hashes) != 0 {
		t.Fatalf("before any request: %d %s", code, b)
	}
	var done map[string]any
	env.post(t, "/v1/completions", body, &done)
	var delta kvEventsResponse
	code, b := env.do(t, http.MethodGet, "/v1/kv_events?epoch="+first.Epoch+"&after=0", nil)
	if code != 200 || json.Unmarshal(b, &delta) != nil || delta.Snapshot {
		t.Fatalf("events after 0: %d %s", code, b)
	}
	var stored []string
	for _, e := range delta.Events {
		if e.Type == "stored" {
			stored = append(stored, e.Hash)
		}
	}
	for _, h := range hs.Prompts[0].Hashes {
		if !slices.Contains(stored, h) {
			t.Fatalf("prompt block %s not reported stored (events %+v)", h, delta.Events)
		}
	}
	var snap kvEventsResponse
	code, b = env.do(t, http.MethodGet, "/v1/kv_events?epoch=other", nil)
	if code != 200 || json.Unmarshal(b, &snap) != nil || !snap.Snapshot || snap.Seq != delta.Seq {
		t.Fatalf("foreign epoch: %d %s", code, b)
	}
	slices.Sort(snap.Hashes)
	slices.Sort(stored)
	if !slices.Equal(snap.Hashes, stored) {
		t.Fatalf("snapshot %v, events stored %v", snap.Hashes, stored)
	}
	if code, b := env.do(t, http.MethodGet, "/v1/kv_events?after=x", nil); code != 400 {
		t.Fatalf("after=x: %d %s", code, b)
	}

	chat := map[string]any{"messages": []map[string]string{{"role": "user", "content": prompt}}}
	var ch kvHashesResponse
	env.post(t, "/v1/kv_hashes/chat/completions", chat, &ch)
	var tok struct{ Tokens []int32 }
	env.post(t, "/tokenize", chat, &tok)
	want := env.eng.BlockHashes(tok.Tokens, "")
	if len(ch.Prompts) != 1 || ch.Prompts[0].NumTokens != len(tok.Tokens) || len(ch.Prompts[0].Hashes) != len(want) {
		t.Fatalf("chat hashes %+v for %d tokens", ch, len(tok.Tokens))
	}
	if code, b := env.do(t, http.MethodPost, "/v1/kv_hashes/completions", []byte(`{"prompt": 3}`)); code != 400 {
		t.Fatalf("bad prompt: %d %s", code, b)
	}
}

// TestReturnTokenIDs checks return_token_ids: the token ids of a stream's chunks, in order,
// are the non-streamed reply's (max_tokens of them), for completions and chat.
func TestReturnTokenIDs(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
		body := map[string]any{"max_tokens": 12, "temperature": 0, "return_token_ids": true}
		if path == "/v1/completions" {
			body["prompt"] = "once upon a time"
		} else {
			body["messages"] = []map[string]string{{"role": "user", "content": "once upon a time"}}
		}
		var whole struct {
			Choices []struct {
				Text     string
				Message  struct{ Content string }
				TokenIDs []int32 `json:"token_ids"`
			}
		}
		env.post(t, path, body, &whole)
		if len(whole.Choices) != 1 || len(whole.Choices[0].TokenIDs) != 12 {
			t.Fatalf("%s: reply %+v", path, whole)
		}
		body["stream"] = true
		var streamed []int32
		for _, data := range env.stream(t, path, body) {
			if data == "[DONE]" {
				break
			}
			var c struct {
				Choices []struct {
					TokenIDs []int32 `json:"token_ids"`
				}
			}
			if err := json.Unmarshal([]byte(data), &c); err != nil {
				t.Fatal(err)
			}
			for _, ch := range c.Choices {
				streamed = append(streamed, ch.TokenIDs...)
			}
		}
		if !slices.Equal(streamed, whole.Choices[0].TokenIDs) {
			t.Fatalf("%s: streamed ids %v, whole reply %v", path, streamed, whole.Choices[0].TokenIDs)
		}
	}
}

// TestKVEventsLogOverflow checks that a router further behind than the log reaches gets a
// snapshot, and one within it exactly the events it missed.
func TestKVEventsLogOverflow(t *testing.T) {
	k := NewKVEvents(2)
	var h [10]kvasir.BlockHash
	for i := range h {
		h[i][0] = byte(i + 1)
		k.Record(kvasir.KVEvent{Hash: h[i]})
	}
	k.Record(kvasir.KVEvent{Hash: h[0], Removed: true})
	if res := k.since(k.epoch, 1, 16); !res.Snapshot || len(res.Hashes) != 9 || res.Seq != 11 {
		t.Fatalf("behind the log: %+v", res)
	}
	res := k.since(k.epoch, 9, 16)
	if res.Snapshot || len(res.Events) != 2 || res.Events[0].Type != "stored" || res.Events[1].Type != "removed" {
		t.Fatalf("within the log: %+v", res)
	}
	if res := k.since(k.epoch, 12, 16); !res.Snapshot {
		t.Fatalf("ahead of the log: %+v", res)
	}
}
