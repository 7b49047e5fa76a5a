package cuda

import "fmt"

// MassArgs are the operands of AttentionMass: Tokens query rows of one sequence (Q, row
// stride QStride, Heads heads), the first at context index Ctx0, over the sequence's
// block table BlockTable (its row of the step's tables). Mass holds a row of MassStride
// entries per KV head.
type MassArgs struct {
	Mass, Q, BlockTable Buffer
	MassStride          int
	QStride, Tokens     int
	Heads, Ctx0         int
	Cache               *KVCacheLayer
	Scale               float32
}

// AttentionMass adds to a.Mass[g·MassStride+j], for each query row and head (g its KV
// head), the probability with which it attends to context entry j (the softmax of its
// scaled scores over entries 0..its own), as the attention kernels weigh the values: the
// attention mass per KV head of the KV policies h2o and snapkv. MassStride must be at
// least Ctx0+Tokens.
func (o *Ops) AttentionMass(a MassArgs) error {
	c := a.Cache
	if err := firstErr(c.Check("attention mass"), c.refuseQuantized("attention mass")); err != nil {
		return err
	}
	if a.Tokens <= 0 || a.Heads <= 0 || a.Heads%c.KVHeads != 0 || a.Ctx0 < 0 || a.QStride < a.Heads*c.HeadDim {
		return fmt.Errorf("cuda attention mass: bad shape tokens=%d heads=%d kvHeads=%d ctx0=%d qStride=%d", a.Tokens, a.Heads, c.KVHeads, a.Ctx0, a.QStride)
	}
	n := a.Ctx0 + a.Tokens
	if a.MassStride < n {
		return fmt.Errorf("cuda attention mass: rows of %d entries for a context of %d", a.MassStride, n)
	}
	if err := firstErr(need("attention mass", "mass", a.Mass, c.KVHeads*a.MassStride, F32),
		need("attention mass", "q", a.Q, (a.Tokens-1)*a.QStride+a.Heads*c.HeadDim, F32),
		need("attention mass", "block table", a.BlockTable, (n+c.BlockSize-1)/c.BlockSize, I32)); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "attn_mass_"+suffix(c.K.DType), Dim3{a.Tokens, a.Heads, 1}, Dim3{128, 1, 1}, 0,
		a.Mass, a.MassStride, a.Q, a.QStride, c.K, a.BlockTable, a.Ctx0, a.Heads, c.KVHeads, c.HeadDim, c.BlockSize, a.Scale)
}
