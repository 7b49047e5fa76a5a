package model

import (
	"fmt"
	"regexp"
	"runtime"
	"sync"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// fp8Linear matches the weights Options.FP8 quantizes: the dense linear layers of
// attention (q, k, v, output) and of the MLP (gate, up, down). The embedding, the output
// projection (the LM head), norms, routers and experts keep their type, as vLLM keeps
// the embedding and LM head in the model's own type: they are read a row at a time or
// matter most to the logits.
var fp8Linear = regexp.MustCompile(`^blk\.\d+\.(attn_q|attn_k|attn_v|attn_output|ffn_gate|ffn_up|ffn_down)\.weight$`)

// FP8Linear reports whether the weight named name (GGUF naming) is one Options.FP8
// quantizes: a dense linear layer's.
func FP8Linear(name string) bool { return fp8Linear.MatchString(name) }

// fp8Upload wraps upload so that the weights fp8Linear matches are quantized to FP8
// (per-output-channel scales) before they are uploaded. A weight already in FP8 (an FP8
// checkpoint) goes as it is; one in a block type (an already quantized GGUF) is an error.
func fp8Upload(upload func(*format.Tensor) (backend.Tensor, error)) func(*format.Tensor) (backend.Tensor, error) {
	return func(t *format.Tensor) (backend.Tensor, error) {
		if !FP8Linear(t.Name) || len(t.Shape) != 2 || t.Type == quant.FP8 {
			return upload(t)
		}
		q, err := QuantizeFP8(t)
		if err != nil {
			return nil, err
		}
		return upload(q)
	}
}

// QuantizeFP8 returns a 2-D F32, F16 or BF16 tensor quantized to quant.FP8, each row
// scaled by its own largest magnitude, the rows spread over the CPU's cores.
func QuantizeFP8(t *format.Tensor) (*format.Tensor, error) {
	switch t.Type {
	case quant.F32, quant.F16, quant.BF16:
	default:
		return nil, fmt.Errorf("tensor %q: --quantization fp8 quantizes BF16, F16 or F32 weights, and this one is %s (the model is already quantized: use its own type, or a BF16 model)", t.Name, t.Type)
	}
	if err := t.Check(); err != nil {
		return nil, err
	}
	rows, cols := t.Rows()
	srb, _ := t.Type.RowBytes(cols)
	drb, err := quant.FP8.RowBytes(cols)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	out := make([]byte, rows*drb)
	workers := min(runtime.NumCPU(), rows)
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Go(func() {
			row := make([]float32, cols)
			for r := w; r < rows; r += workers {
				if err := quant.Dequantize(t.Type, t.Data[r*srb:(r+1)*srb], row); err != nil {
					errs[w] = err
					return
				}
				if err := quant.Quantize(quant.FP8, row, out[r*drb:(r+1)*drb]); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("tensor %q: fp8: %w", t.Name, err)
		}
	}
	return &format.Tensor{Name: t.Name, Type: quant.FP8, Shape: []int{rows, cols}, Data: out}, nil
}
