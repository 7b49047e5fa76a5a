package kvasir

import (
	"bytes"
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/engine"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/spec"
)

// speculation is an engine's checked speculative-decoding configuration, with its draft
// model loaded for draft_model. A nil *speculation is "off"; its methods take it.
type speculation struct {
	cfg spec.Config
	// draft is the draft model, bound on the target's backends (draft_model only).
	draft *Loaded
}

// newSpeculation checks opt.Speculative against the target l and loads its draft model;
// nil when speculative decoding is off. Nothing is left loaded on failure.
func newSpeculation(l *Loaded, opt Options) (*speculation, error) {
	if opt.Speculative == nil {
		return nil, nil
	}
	cfg, err := opt.Speculative.Check()
	if err != nil {
		return nil, err
	}
	sp := &speculation{cfg: cfg}
	switch {
	case cfg.Proposer != nil:
	case cfg.Method == spec.MethodLayerSkip:
		if layers := l.fm.Config.Layers; cfg.DraftLayers >= layers {
			return nil, fmt.Errorf("speculative config: draft_layers %d: the target %s has %d layers; want 1..%d", cfg.DraftLayers, l.fm.Name(), layers, layers-1)
		}
	case cfg.Method == spec.MethodDraftModel:
		if sp.draft, err = loadDraft(l, cfg.Model, opt); err != nil {
			return nil, err
		}
	}
	return sp, nil
}

// loadDraft opens the draft model ref names and binds it as Load binds the target, on the
// target's own backends (the same device and ranks, the same KV cache element type), and
// checks that it has the target's vocabulary.
func loadDraft(target *Loaded, ref string, opt Options) (*Loaded, error) {
	fm, err := OpenRef(ref, RefOptions{Log: opt.Log})
	if err != nil {
		return nil, fmt.Errorf("draft model %s: %w", ref, err)
	}
	dopt := opt
	dopt.Backends, dopt.UploadProgress, dopt.Speculative = target.bes, nil, nil
	d, err := Load(fm, dopt)
	if err != nil {
		fm.Close()
		return nil, fmt.Errorf("draft model %s: %w", ref, err)
	}
	if err := sameVocabulary(target, d); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// sameVocabulary checks that the draft's token ids mean what the target's do: the same
// number of logits, and, when both files carry a vocabulary, the same tokens (a file
// without one, such as a llama2.c checkpoint with no tokenizer named, is taken on its
// size).
func sameVocabulary(target, draft *Loaded) error {
	tn, dn := target.fm.Name(), draft.fm.Name()
	if tv, dv := target.fm.Config.VocabSize, draft.fm.Config.VocabSize; tv != dv {
		return fmt.Errorf("draft model %s has a vocabulary of %d tokens, the target %s one of %d: a draft must share the target's vocabulary", dn, dv, tn, tv)
	}
	tt, dt := target.tok, draft.tok
	if tt == nil || dt == nil {
		return nil
	}
	if a, b := tt.NumTokens(), dt.NumTokens(); a != b {
		return fmt.Errorf("draft model %s has a tokenizer of %d tokens, the target %s one of %d: a draft must share the target's vocabulary", dn, b, tn, a)
	}
	for i := range tt.NumTokens() {
		if a, b := tt.TokenBytes(i), dt.TokenBytes(i); !bytes.Equal(a, b) {
			return fmt.Errorf("draft model %s has another vocabulary than the target %s: token %d is %q in the draft, %q in the target", dn, tn, i, b, a)
		}
	}
	return nil
}

// draftBytesPerToken returns the KV cache bytes the draft model adds to every token (0
// without one).
func (s *speculation) draftBytesPerToken() int64 {
	if s == nil || s.draft == nil {
		return 0
	}
	m := s.draft.m
	return model.KVBytesPerToken(m.RankConfig(), m.KVRowBytes())
}

// checkContext checks that the draft model's context covers the engine's context of
// maxLen tokens (target names the target).
func (s *speculation) checkContext(target string, maxLen int) error {
	if s == nil || s.draft == nil {
		return nil
	}
	if n := s.draft.fm.Config.ContextLen; n > 0 && n < maxLen {
		return fmt.Errorf("draft model %s has a context of %d tokens, shorter than the %d of the target %s: pass a max-model-len of at most %d", s.draft.fm.Name(), n, maxLen, target, n)
	}
	return nil
}

// engine returns the engine's settings (nil when off).
func (s *speculation) engine() *engine.Speculation {
	if s == nil {
		return nil
	}
	var draft *model.Model
	if s.draft != nil {
		draft = s.draft.m
	}
	return s.cfg.Speculation(draft)
}

// close releases the draft model (not the backends, which are the target's).
func (s *speculation) close() error {
	if s == nil || s.draft == nil {
		return nil
	}
	return s.draft.Close()
}

// Speculative returns the engine's speculative-decoding configuration, checked and with
// its defaults filled in, or nil when it does not speculate.
func (e *Engine) Speculative() *SpeculativeConfig {
	if e.spec == nil {
		return nil
	}
	c := e.spec.cfg
	return &c
}

// Draft returns the draft model the engine speculates with (draft_model), nil without one.
func (e *Engine) Draft() *Loaded {
	if e.spec == nil {
		return nil
	}
	return e.spec.draft
}
