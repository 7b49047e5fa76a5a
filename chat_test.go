package kvasir

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/chat"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// openStories opens an engine on stories260K, closed when the test ends.
func openStories(t *testing.T) *Engine {
	t.Helper()
	e, err := Open(testdata.Path(t, "models/stories260K/stories260K.bin"),
		Options{Tokenizer: testdata.Path(t, "models/stories260K/tok512.bin"), Threads: 1, KVCacheMemory: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// TestRenderChat: the one chat rendering hands the template the vocabulary's BOS and EOS
// texts, parses the special tokens it writes, does not double a BOS the template wrote,
// cuts the text after the last message for continue_final_message, and passes a
// template's raise_exception on.
func TestRenderChat(t *testing.T) {
	e := openStories(t)
	v := e.Loaded().Tokenizer().Vocab()
	render := func(src string, in chat.Input, continueFinal bool) []int32 {
		t.Helper()
		tmpl, err := chat.New(src)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := e.RenderChat(tmpl, in, continueFinal)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	msgs := []chat.Message{{Role: "user", Content: "Once upon"}, {Role: "assistant", Content: "a time"}}
	plain, err := e.Tokenize("Once upon a time", true)
	if err != nil {
		t.Fatal(err)
	}
	if plain[0] != int32(v.BOS) {
		t.Fatalf("the vocabulary adds no BOS: %v", plain)
	}
	join := `{% for m in messages %}{{ m['content'] }}{% if not loop.last %} {% endif %}{% endfor %}`
	// No BOS in the template: the tokenizer's one.
	if got := render(join, chat.Input{Messages: msgs}, false); !slices.Equal(got, plain) {
		t.Errorf("plain template: %v, want %v", got, plain)
	}
	// The template writes bos_token itself: still one BOS.
	if got := render("{{ bos_token }}"+join, chat.Input{Messages: msgs}, false); !slices.Equal(got, plain) {
		t.Errorf("bos_token template: %v, want %v (one BOS)", got, plain)
	}
	// eos_token is the vocabulary's EOS text, parsed back to its id.
	got := render(join+"{{ eos_token }}", chat.Input{Messages: msgs}, false)
	if len(got) != len(plain)+1 || got[len(got)-1] != int32(v.EOS) {
		t.Errorf("eos_token template: %v, want %v then EOS %d", got, plain, v.EOS)
	}
	// continue_final_message: the text stops after the last message's content.
	ended := `{% for m in messages %}{{ m['content'] }}{{ eos_token }}{% endfor %}`
	got = render(ended, chat.Input{Messages: msgs}, true)
	if got[len(got)-1] == int32(v.EOS) {
		t.Errorf("continue_final_message kept the text after the last message: %v", got)
	}
	if text, _ := e.Detokenize(got, true); !strings.HasSuffix(text, "a time") {
		t.Errorf("continue_final_message: %q", text)
	}
	// A template's raise_exception reaches the caller as a RaisedError.
	tmpl, err := chat.New(`{{ raise_exception("no assistants here") }}`)
	if err != nil {
		t.Fatal(err)
	}
	var raised *chat.RaisedError
	if _, err := e.RenderChat(tmpl, chat.Input{Messages: msgs}, false); !errors.As(err, &raised) || raised.Message != "no assistants here" {
		t.Errorf("raise_exception: %v", err)
	}
}

// TestRenderChatContext: a template in a sandbox gives the same tokens as one in this
// process, and a render whose context has ended stops with the context's error.
func TestRenderChatContext(t *testing.T) {
	e := openStories(t)
	src := `{{ bos_token }}{% for m in messages %}{{ m['content'] }} {% endfor %}{{ eos_token }}`
	local, err := chat.New(src)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := chat.NewSandbox(chat.SandboxConfig{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	remote, err := sb.Load(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	in := chat.Input{Messages: []chat.Message{{Role: "user", Content: "Once upon"}, {Role: "assistant", Content: "a time"}}}
	want, err := e.RenderChat(local, in, false)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := e.RenderChatContext(context.Background(), remote, in, false); err != nil || !slices.Equal(got, want) {
		t.Errorf("sandboxed: %v (%v), want %v", got, err, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tmpl := range []*chat.Template{local, remote} {
		if ids, err := e.RenderChatContext(ctx, tmpl, in, false); !errors.Is(err, context.Canceled) || ids != nil {
			t.Errorf("cancelled: %v, %v", ids, err)
		}
	}
}
