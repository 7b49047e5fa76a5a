package tokenizer

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestEncodeContext: with a live context EncodeContext gives Encode's ids; with an ended
// one, its error and no ids; a stop that comes while one long fragment is encoded ends the
// encoding within stopEvery pre-tokens, not at the fragment's end.
func TestEncodeContext(t *testing.T) {
	tok := loadQwen3(t)
	text := strings.Repeat("Hello <|im_start|>world, how are you? ", 300)
	opt := EncodeOptions{AddSpecial: true, ParseSpecial: true}
	ids, err := tok.EncodeContext(context.Background(), text, opt)
	if err != nil || !slices.Equal(ids, tok.Encode(text, opt)) {
		t.Fatalf("EncodeContext differs from Encode (%v)", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if ids, err := tok.EncodeContext(ctx, text, opt); !errors.Is(err, context.Canceled) || ids != nil {
		t.Fatalf("cancelled: %d ids, %v", len(ids), err)
	}

	text = strings.Repeat("word ", 100_000) // one fragment of 100,000 pre-tokens
	asked := 0
	out, stopped := tok.encode(text, EncodeOptions{}, func() bool { asked++; return asked > 3 })
	if !stopped {
		t.Fatal("the encoding did not stop")
	}
	// The fourth look, after 4 x 256 pre-tokens, stops it: each word is one token here.
	if len(out) > 5*256 {
		t.Errorf("%d tokens encoded before stopping, want about 1000", len(out))
	}
}
