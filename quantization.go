package kvasir

import "fmt"

// Quantization is how a model's weights are quantized at load (vLLM's --quantization).
type Quantization uint8

// The load-time quantizations.
const (
	// QuantizationNone keeps the weights in the file's types.
	QuantizationNone Quantization = iota
	// QuantizationFP8 quantizes the dense linear layers' weights (attention's q, k, v and
	// output, the MLP's gate, up and down) to FP8 E4M3 with a scale per output channel,
	// from a BF16, F16 or F32 model; the embedding and the output projection keep their
	// type. A model already quantized to a block type (a Q8_0 or Q4_K GGUF) is an error.
	// On a GPU it needs compute capability 8.9 or newer.
	QuantizationFP8
)

// quantizationNames are the names ParseQuantization reads, by value.
var quantizationNames = [...]string{QuantizationNone: "none", QuantizationFP8: "fp8"}

// ParseQuantization reads a quantization: "none" (or "") or "fp8".
func ParseQuantization(s string) (Quantization, error) {
	if s == "" {
		return QuantizationNone, nil
	}
	for q, name := range quantizationNames {
		if s == name {
			return Quantization(q), nil
		}
	}
	return 0, fmt.Errorf("quantization %q: want none or fp8", s)
}

// String returns the quantization's name as ParseQuantization reads it.
func (q Quantization) String() string {
	if int(q) < len(quantizationNames) {
		return quantizationNames[q]
	}
	return fmt.Sprintf("Quantization(%d)", uint8(q))
}
