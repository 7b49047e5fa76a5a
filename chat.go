package kvasir

import (
	"context"
	"fmt"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/chat"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// RenderChat renders a conversation with the chat template t and tokenizes it as a prompt,
// the one way every command and the server turn messages into tokens: the template gets
// the vocabulary's BOS and EOS texts as bos_token and eos_token (unless in sets them);
// special-token texts in the result are parsed as such; BOS is added as the vocabulary
// asks, but not doubled when the template wrote one itself. With continueFinal the text is
// cut after the last message's content, so that the model continues that message rather
// than starting a new one. A template's raise_exception comes back as a *chat.RaisedError,
// a limit it exceeds as a *chat.LimitError.
func (e *Engine) RenderChat(t *chat.Template, in chat.Input, continueFinal bool) ([]int32, error) {
	return e.RenderChatContext(context.Background(), t, in, continueFinal)
}

// RenderChatContext is RenderChat that stops rendering (a sandboxed template's worker is
// killed) and tokenizing when ctx ends, returning its error.
func (e *Engine) RenderChatContext(ctx context.Context, t *chat.Template, in chat.Input, continueFinal bool) ([]int32, error) {
	tok := e.l.tok
	if tok == nil {
		return nil, fmt.Errorf("model %s has no tokenizer", e.ModelName())
	}
	v := tok.Vocab()
	if in.BOSToken == "" {
		in.BOSToken = tokenText(v, v.BOS)
	}
	if in.EOSToken == "" {
		in.EOSToken = tokenText(v, v.EOS)
	}
	text, err := t.RenderContext(ctx, in)
	if err != nil {
		return nil, err
	}
	if continueFinal && len(in.Messages) > 0 {
		content, _ := in.Messages[len(in.Messages)-1].Content.(string)
		if i := strings.LastIndex(text, content); content != "" && i >= 0 {
			text = text[:i+len(content)]
		}
	}
	ids, err := tok.EncodeContext(ctx, text, tokenizer.EncodeOptions{AddSpecial: true, ParseSpecial: true})
	if err != nil {
		return nil, fmt.Errorf("tokenizing the chat prompt: %w", err)
	}
	if bos := addedBOS(tok); bos >= 0 && len(ids) >= 2 && ids[0] == bos && ids[1] == bos {
		ids = ids[1:]
	}
	return toInt32(ids), nil
}

// addedBOS returns the BOS id the tokenizer adds to every encoding, or -1 when it adds
// none.
func addedBOS(tok *tokenizer.Tokenizer) int {
	if ids := tok.Encode("", tokenizer.EncodeOptions{AddSpecial: true}); len(ids) == 1 {
		return ids[0]
	}
	return -1
}

// tokenText returns the text of token id in v, "" when there is no such token.
func tokenText(v *tokenizer.Vocab, id int) string {
	if id >= 0 && id < len(v.Tokens) {
		return v.Tokens[id]
	}
	return ""
}

// toInt32 converts token ids to the engine's type.
func toInt32(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}
