package synth

import (
	"bytes"
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// Model synthesizes a model of the given shape in memory, laid out as a GGUF file would
// hold it, with the made-up byte-fallback vocabulary. It is how kvasir gets a runnable
// default model with no file at all.
func Model(shape Shape, dtype quant.Type, seed uint64) (*format.Model, error) {
	tensors, err := Tensors(shape.Config, dtype, seed, GGUF)
	if err != nil {
		return nil, err
	}
	vocab, err := ByteVocab(shape.Config.VocabSize)
	if err != nil {
		return nil, err
	}
	out := make([]*format.Tensor, len(tensors))
	for i := range tensors {
		ot := &tensors[i]
		size, err := ot.Size()
		if err != nil {
			return nil, err
		}
		buf := bytes.NewBuffer(make([]byte, 0, size))
		if ot.Write != nil {
			err = ot.Write(buf)
		} else {
			_, err = buf.Write(ot.Data)
		}
		if err != nil {
			return nil, fmt.Errorf("synth %s: %w", ot.Name, err)
		}
		out[i] = &format.Tensor{Name: ot.Name, Type: ot.Type, Shape: ot.Shape, Data: buf.Bytes()}
	}
	name := fmt.Sprintf("synthetic-%s-%s", shape.Name, dtype)
	return format.NewModel(name, shape.Config, out, vocab, "")
}
