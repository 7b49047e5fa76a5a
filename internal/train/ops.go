package train

import (
	"math"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
)

// This file holds each op of the model twice: forward, and backward given the gradient of
// the loss with respect to the op's output (dy). Backward functions add into the weight
// gradients (a batch accumulates) and write the input gradients.

// embed gathers the rows of the [vocab][dim] table e for tokens into x [n][dim].
func embed(x, e []float32, tokens []int32, dim int) {
	for n, t := range tokens {
		copy(x[n*dim:(n+1)*dim], e[int(t)*dim:(int(t)+1)*dim])
	}
}

// embedBackward adds each row of dx to the gradient row of its token: de[t] += dx[n].
func embedBackward(de, dx []float32, tokens []int32, dim int) {
	for n, t := range tokens {
		axpy(de[int(t)*dim:(int(t)+1)*dim], dx[n*dim:(n+1)*dim], 1)
	}
}

// linear computes y = x W^T: x is [n][in], w is [out][in], y is [n][out].
func linear(p *cpu.Pool, y, x, w []float32, n, in, out int) {
	matmulT(p, y, w, out, in, x, n)
}

// linearBackward writes dx = dy W (unless dx is nil) and adds dy^T x into dw: the
// gradients of y = x W^T. Both products run as GEMMs on transposed copies.
func linearBackward(p *cpu.Pool, dx, dw, dy, x, w []float32, n, in, out int) {
	if dx != nil {
		wt := make([]float32, in*out)
		transpose(wt, w, out, in)
		matmulT(p, dx, wt, in, out, dy, n) // dx[n][i] = sum_o dy[n][o] w[o][i]
	}
	xt := make([]float32, in*n)
	transpose(xt, x, n, in)
	dyt := make([]float32, out*n)
	transpose(dyt, dy, n, out)
	g := make([]float32, out*in)
	matmulT(p, g, xt, in, n, dyt, out) // g[o][i] = sum_n dy[n][o] x[n][i]
	axpy(dw, g, 1)
}

// rmsNorm computes y = x / rms(x) * w row by row (rms(x) = sqrt(mean(x^2) + eps)) and
// keeps each row's 1/rms in inv for the backward pass.
func rmsNorm(y, inv, x, w []float32, n, dim int, eps float32) {
	for r := 0; r < n; r++ {
		xr, yr := x[r*dim:(r+1)*dim], y[r*dim:(r+1)*dim]
		var ss float64
		for _, v := range xr {
			ss += float64(v) * float64(v)
		}
		s := float32(1 / math.Sqrt(ss/float64(dim)+float64(eps)))
		inv[r] = s
		for i, v := range xr {
			yr[i] = v * s * w[i]
		}
	}
}

// rmsNormBackward: with g = dy * w and s = 1/rms(x),
// dx = s g - x s^3 (g . x) / dim, and dw += dy x s.
func rmsNormBackward(dx, dw, dy, x, inv, w []float32, n, dim int) {
	for r := 0; r < n; r++ {
		xr, dyr, dxr := x[r*dim:(r+1)*dim], dy[r*dim:(r+1)*dim], dx[r*dim:(r+1)*dim]
		s := inv[r]
		var gx float64
		for i, v := range xr {
			gx += float64(dyr[i] * w[i] * v)
		}
		c := float32(gx) * s * s * s / float32(dim)
		for i, v := range xr {
			dxr[i] = s*dyr[i]*w[i] - v*c
			dw[i] += dyr[i] * v * s
		}
	}
}

// ropeTables returns cos and sin of the rotary angles pos * theta^(-2i/headDim) for
// positions [0, ctx) and pairs i in [0, headDim/2), row-major by position.
func ropeTables(ctx, headDim int, theta float64) (cos, sin []float32) {
	half := headDim / 2
	cos, sin = make([]float32, ctx*half), make([]float32, ctx*half)
	for p := 0; p < ctx; p++ {
		for i := 0; i < half; i++ {
			a := float64(p) * math.Pow(theta, -float64(2*i)/float64(headDim))
			cos[p*half+i], sin[p*half+i] = float32(math.Cos(a)), float32(math.Sin(a))
		}
	}
	return cos, sin
}

// rope rotates, in place, each pair (2i, 2i+1) of every head of x [n][heads*headDim] by
// the angle of its token's position (n mod seqLen: a batch is whole sequences end to end),
// the interleaved layout of llama.cpp's "llama" architecture. inverse rotates back, which
// is also the backward pass: a rotation's transpose is its inverse.
func rope(x []float32, n, seqLen, heads, headDim int, cos, sin []float32, inverse bool) {
	half := headDim / 2
	for r := 0; r < n; r++ {
		pos := r % seqLen
		c, s := cos[pos*half:(pos+1)*half], sin[pos*half:(pos+1)*half]
		for h := 0; h < heads; h++ {
			v := x[(r*heads+h)*headDim : (r*heads+h+1)*headDim]
			for i := 0; i < half; i++ {
				si := s[i]
				if inverse {
					si = -si
				}
				a, b := v[2*i], v[2*i+1]
				v[2*i], v[2*i+1] = a*c[i]-b*si, a*si+b*c[i]
			}
		}
	}
}

// attnShape describes causal grouped-query attention over a batch of whole sequences.
type attnShape struct {
	seqs, seqLen       int
	heads, kvHeads, hd int
}

// attention computes, for each sequence, query head h and position t,
// out_t = sum_{j<=t} softmax_j(q_t . k_j / sqrt(hd)) v_j, with query head h reading
// key/value head h / (heads/kvHeads). q and out are [n][heads*hd], k and v [n][kvHeads*hd];
// the softmax weights go to probs [seqs][heads][seqLen][seqLen] for the backward pass.
// Work is split over (sequence, key/value head) pairs.
func attention(p *cpu.Pool, out, probs, q, k, v []float32, a attnShape) {
	scale := float32(1 / math.Sqrt(float64(a.hd)))
	group := a.heads / a.kvHeads
	qw, kw := a.heads*a.hd, a.kvHeads*a.hd
	T := a.seqLen
	p.Run(a.seqs*a.kvHeads, func(start, end int) {
		for job := start; job < end; job++ {
			b, kh := job/a.kvHeads, job%a.kvHeads
			for h := kh * group; h < (kh+1)*group; h++ {
				for t := 0; t < T; t++ {
					qt := q[(b*T+t)*qw+h*a.hd:][:a.hd]
					pr := probs[((b*a.heads+h)*T+t)*T:][:T]
					maxS := float32(math.Inf(-1))
					for j := 0; j <= t; j++ {
						s := dot(qt, k[(b*T+j)*kw+kh*a.hd:][:a.hd]) * scale
						pr[j] = s
						maxS = max(maxS, s)
					}
					var sum float32
					for j := 0; j <= t; j++ {
						pr[j] = float32(math.Exp(float64(pr[j] - maxS)))
						sum += pr[j]
					}
					ot := out[(b*T+t)*qw+h*a.hd:][:a.hd]
					clear(ot)
					for j := 0; j <= t; j++ {
						pr[j] /= sum
						axpy(ot, v[(b*T+j)*kw+kh*a.hd:][:a.hd], pr[j])
					}
					clear(pr[t+1:])
				}
			}
		}
	})
}

// attentionBackward, from dout, writes dq and adds into dk and dv (which start zeroed):
// dv_j += p_j dout_t; dp_j = dout_t . v_j; ds_j = p_j (dp_j - sum_i p_i dp_i);
// dq_t = scale sum_j ds_j k_j; dk_j += scale ds_j q_t.
func attentionBackward(p *cpu.Pool, dq, dk, dv, dout, probs, q, k, v []float32, a attnShape) {
	scale := float32(1 / math.Sqrt(float64(a.hd)))
	group := a.heads / a.kvHeads
	qw, kw := a.heads*a.hd, a.kvHeads*a.hd
	T := a.seqLen
	p.Run(a.seqs*a.kvHeads, func(start, end int) {
		dp := make([]float32, T)
		for job := start; job < end; job++ {
			b, kh := job/a.kvHeads, job%a.kvHeads
			for h := kh * group; h < (kh+1)*group; h++ {
				for t := 0; t < T; t++ {
					qt := q[(b*T+t)*qw+h*a.hd:][:a.hd]
					dqt := dq[(b*T+t)*qw+h*a.hd:][:a.hd]
					doT := dout[(b*T+t)*qw+h*a.hd:][:a.hd]
					pr := probs[((b*a.heads+h)*T+t)*T:][:T]
					var pdp float32
					for j := 0; j <= t; j++ {
						dp[j] = dot(doT, v[(b*T+j)*kw+kh*a.hd:][:a.hd])
						pdp += pr[j] * dp[j]
						axpy(dv[(b*T+j)*kw+kh*a.hd:][:a.hd], doT, pr[j])
					}
					clear(dqt)
					for j := 0; j <= t; j++ {
						ds := pr[j] * (dp[j] - pdp) * scale
						axpy(dqt, k[(b*T+j)*kw+kh*a.hd:][:a.hd], ds)
						axpy(dk[(b*T+j)*kw+kh*a.hd:][:a.hd], qt, ds)
					}
				}
			}
		}
	})
}

func sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

// swiGLU computes h = silu(g) * u elementwise (silu(g) = g sigmoid(g)).
func swiGLU(h, g, u []float32) {
	for i, gi := range g {
		h[i] = gi * sigmoid(gi) * u[i]
	}
}

// swiGLUBackward writes dg = dh u silu'(g) and du = dh silu(g), where
// silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).
func swiGLUBackward(dg, du, dh, g, u []float32) {
	for i, gi := range g {
		s := sigmoid(gi)
		du[i] = dh[i] * gi * s
		dg[i] = dh[i] * u[i] * s * (1 + gi*(1-s))
	}
}

// dot returns a . b over len(a).
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// axpy adds s*x to y over len(y).
func axpy(y, x []float32, s float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += s * x[i]
	}
}
