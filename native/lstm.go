package native

// #include "heterps_kernels.h"
import "C"

// LSTMForward is the pointwise part of an LSTM cell. z [batch x 4*hidden]
// holds the gate pre-activations from one GEMM on [x, h], in gate order i, f,
// g, o (gate k of unit j at column k*hidden+j); bias [4*hidden] may be nil:
//
//	for each row, for j := range hidden {
//		i := sigmoid(z_i + b_i); f := sigmoid(z_f + b_f)
//		g := tanh(z_g + b_g);    o := sigmoid(z_o + b_o)
//		gates_i, gates_f, gates_g, gates_o = i, f, g, o
//		c[j] = f*cPrev[j] + i*g
//		h[j] = o * tanh(c[j])
//	}
//
// cPrev, c and h are [batch x hidden]. No output may alias an input.
func (b *CPU) LSTMForward(batch, hidden int, z, bias, cPrev, gates, c, h Buffer) error {
	const op = "lstm forward"
	n, err := matrixLen(op, batch, hidden)
	if err != nil {
		return err
	}
	var zh, bh, cph, gh, ch, hh HostBuffer
	err = unwrapOperands(op,
		operand{&zh, "z", z, 4 * n, false},
		operand{&bh, "bias", bias, 4 * hidden, true},
		operand{&cph, "cPrev", cPrev, n, false},
		operand{&gh, "gates", gates, 4 * n, false},
		operand{&ch, "c", c, n, false},
		operand{&hh, "h", h, n, false})
	if err != nil {
		return err
	}
	H := hidden
	chunks(batch, rowGrain(4*H), b.threads, func(_, lo, hi int) {
		C.hps_lstm_fwd(b.cisa(), C.int64_t(hi-lo), C.int64_t(H), fptr(zh[4*H*lo:]), fptr(bh),
			fptr(cph[H*lo:]), fptr(gh[4*H*lo:]), fptr(ch[H*lo:]), fptr(hh[H*lo:]))
	})
	return nil
}

// LSTMBackward is the backward of LSTMForward: from the saved gates, cPrev
// and c, the gradient dh of h and dc of c (from the next step; nil means
// zero), it writes dz [batch x 4*hidden] and dcPrev [batch x hidden]:
//
//	for each row, for j := range hidden {
//		tc := tanh(c[j])
//		dct := dc[j] + dh[j]*o*(1-tc*tc)
//		dz_i = dct*g * i*(1-i);   dz_f = dct*cPrev[j] * f*(1-f)
//		dz_g = dct*i * (1-g*g);   dz_o = dh[j]*tc * o*(1-o)
//		dcPrev[j] = dct * f
//	}
//
// No output may alias an input.
func (b *CPU) LSTMBackward(batch, hidden int, gates, cPrev, c, dh, dc, dz, dcPrev Buffer) error {
	const op = "lstm backward"
	n, err := matrixLen(op, batch, hidden)
	if err != nil {
		return err
	}
	var gh, cph, ch, dhh, dch, dzh, dcph HostBuffer
	err = unwrapOperands(op,
		operand{&gh, "gates", gates, 4 * n, false},
		operand{&cph, "cPrev", cPrev, n, false},
		operand{&ch, "c", c, n, false},
		operand{&dhh, "dh", dh, n, false},
		operand{&dch, "dc", dc, n, true},
		operand{&dzh, "dz", dz, 4 * n, false},
		operand{&dcph, "dcPrev", dcPrev, n, false})
	if err != nil {
		return err
	}
	H := hidden
	chunks(batch, rowGrain(4*H), b.threads, func(_, lo, hi int) {
		var dcp *C.float
		if dch != nil {
			dcp = fptr(dch[H*lo:])
		}
		C.hps_lstm_bwd(b.cisa(), C.int64_t(hi-lo), C.int64_t(H), fptr(gh[4*H*lo:]),
			fptr(cph[H*lo:]), fptr(ch[H*lo:]), fptr(dhh[H*lo:]), dcp,
			fptr(dzh[4*H*lo:]), fptr(dcph[H*lo:]))
	})
	return nil
}

// operand is one named buffer of an op, the length it must have, and whether
// it may be nil.
type operand struct {
	dst      *HostBuffer
	name     string
	buf      Buffer
	want     int
	optional bool
}

// unwrapOperands checks and unwraps each operand into its dst, stopping at the
// first error.
func unwrapOperands(op string, ops ...operand) error {
	for _, o := range ops {
		var err error
		if o.optional {
			*o.dst, err = optional(op+": "+o.name, o.buf, o.want)
		} else {
			*o.dst, err = host(op+": "+o.name, o.buf, o.want)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
