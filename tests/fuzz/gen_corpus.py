#!/usr/bin/env python3
"""Writes the seed corpora of tests/fuzz (corpus/fuzz_tcp_frame, corpus/fuzz_cm_frame,
corpus/fuzz_tcp_ud):
valid frames of every op and message type, and truncated, oversized and
malformed ones.  The files are committed; rerun after a wire change.
Layouts: hw/tcp/zd_tcp_wire.h, hw/tcp/zd_tcp_ud_wire.h, core/zd_cm_wire.h, and struct cfg in
fuzz_tcp_frame.c."""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# ---- tcp: struct cfg + frames ------------------------------------------
MAGIC, VERSION, MAXP = 0x5044545A, 3, 1 << 30
HELLO, SEND, WRITE, READ_REQ, READ_RESP, ACK, NAK = range(1, 8)
WRITE_IMM, FETCH_ADD, CMP_SWAP, ATOMIC_RESP, CM = range(8, 13)
CM_DISC, CM_DISC_ACK, CM_PING, CM_PONG = 5, 6, 10, 11
TOKEN, RKEY, VBASE, REGION = 0x1122334455667788, 0x5A5A0001, 0x7F0000001000, 4096
F_HELLO, F_RW, F_RR, F_RA, F_CARRY = 1, 2, 4, 8, 16
OP_SEND, OP_WRITE, OP_READ, OP_ATOMIC = 0, 1, 2, 3


def cfg(flags=F_RW | F_RR | F_RA, ops=(), ndone=0, recvs=(), base=1, off=0, expect=0, rlen=()):
    reqops = 0
    for i, o in enumerate(ops):
        reqops |= o << (2 * i)
    recvlen = 0
    for i, n in enumerate(recvs):
        recvlen |= (n // 16) << (4 * i)
    rl = list(rlen) + [0] * (8 - len(rlen))
    return struct.pack('<BBBBHHIII8B', flags, len(ops), ndone, len(recvs), reqops, recvlen,
                       base, off, expect, *rl)


def hdr(op, seq=0, ln=0, rkey=0, rlen=0, raddr=0, token=0, flags=0, magic=MAGIC, version=VERSION):
    return struct.pack('<IBBHIIIIQQ', magic, version, op, flags, seq, ln, rkey, rlen, raddr, token)


def hello():
    return hdr(HELLO, token=TOKEN)


def tcp_seeds():
    s = {}
    c0 = cfg()
    s['hello'] = c0 + hello()
    s['hello_bad_token'] = c0 + hdr(HELLO, token=TOKEN + 1)
    s['hello_with_payload'] = c0 + hdr(HELLO, ln=4, token=TOKEN) + b'abcd'
    s['hello_twice'] = c0 + hello() + hello()
    s['no_hello_send'] = c0 + hdr(SEND, ln=4) + b'abcd'
    s['bad_magic'] = c0 + hdr(HELLO, token=TOKEN, magic=0x12345678)
    s['bad_version'] = c0 + hdr(HELLO, token=TOKEN, version=4)
    s['version_2'] = c0 + hdr(HELLO, token=TOKEN, version=2)
    s['old_version'] = c0 + hdr(HELLO, token=TOKEN, version=1)
    s['bad_op_0'] = c0 + hello() + hdr(0)
    s['bad_op_13'] = c0 + hello() + hdr(13)
    # carried: the stream is the CM's (no HELLO), its CM frames in it
    cc = cfg(flags=F_CARRY | F_RW | F_RR | F_RA, recvs=(16,))
    s['cm_on_own_socket'] = c0 + hello() + hdr(CM, rlen=CM_PING)
    s['carried_cm'] = cc + hdr(CM, rlen=CM_PING, token=0x77) + hdr(CM, rlen=CM_PONG, token=0x77) + \
        hdr(SEND, 0, 8) + b'd' * 8 + hdr(CM, rlen=CM_DISC, token=5) + hdr(CM, rlen=CM_DISC_ACK)
    s['carried_hello'] = cc + hello()
    s['carried_cm_bad_type'] = cc + hdr(CM, rlen=1) + hdr(CM, rlen=CM_PING)
    s['carried_cm_type_0'] = cc + hdr(CM, rlen=0)
    s['carried_cm_with_len'] = cc + hdr(CM, 0, 4, rlen=CM_PING) + b'abcd'
    s['too_long'] = c0 + hello() + hdr(SEND, ln=MAXP + 1)
    cr = cfg(recvs=(64, 16))
    s['send_recv'] = cr + hello() + hdr(SEND, 0, 32) + b'S' * 32 + hdr(SEND, 1, 16) + b's' * 16
    s['send_solicited'] = cr + hello() + hdr(SEND, 0, 8, flags=1) + b'x' * 8
    s['send_zero'] = cr + hello() + hdr(SEND, 0, 0)
    s['send_longer_than_recv'] = cfg(recvs=(16,)) + hello() + hdr(SEND, 0, 32) + b'L' * 32
    s['send_eager'] = c0 + hello() + hdr(SEND, 0, 100) + b'e' * 100 + hdr(SEND, 1, 4) + b'EEEE'
    s['send_eager_too_big'] = c0 + hello() + hdr(SEND, 0, 5000) + b'B' * 64
    s['send_seq_wrong'] = cr + hello() + hdr(SEND, 5, 4) + b'abcd'
    s['send_seq_wrap'] = cfg(recvs=(16, 16), expect=0xFFFFFFFF) + hello() + \
        hdr(SEND, 0xFFFFFFFF, 4) + b'abcd' + hdr(SEND, 0, 4) + b'efgh'
    s['send_truncated_payload'] = cr + hello() + hdr(SEND, 0, 64) + b'T' * 10
    s['truncated_header'] = c0 + hello() + hdr(SEND, 0, 4)[:30]
    s['write'] = c0 + hello() + hdr(WRITE, 0, 64, RKEY, raddr=VBASE + 100) + b'W' * 64
    s['write_region_end'] = c0 + hello() + hdr(WRITE, 0, 8, RKEY, raddr=VBASE + REGION - 8) + b'w' * 8
    s['write_past_end'] = c0 + hello() + hdr(WRITE, 0, 8, RKEY, raddr=VBASE + REGION - 6) + b'w' * 8
    s['write_below'] = c0 + hello() + hdr(WRITE, 0, 2, RKEY, raddr=VBASE - 1) + b'ww'
    s['write_wrap'] = c0 + hello() + hdr(WRITE, 0, 16, RKEY, raddr=(1 << 64) - 8) + b'w' * 16
    s['write_zero_at_end'] = c0 + hello() + hdr(WRITE, 0, 0, RKEY, raddr=VBASE + REGION - 1) + \
        hdr(WRITE, 1, 0, RKEY, raddr=VBASE + REGION)
    s['write_no_right'] = cfg(flags=F_RR) + hello() + hdr(WRITE, 0, 4, RKEY, raddr=VBASE) + b'abcd'
    s['write_bad_rkey'] = c0 + hello() + hdr(WRITE, 0, 4, RKEY + 1, raddr=VBASE) + b'abcd'
    s['write_huge'] = c0 + hello() + hdr(WRITE, 0, MAXP, RKEY, raddr=VBASE)
    s['read_req'] = c0 + hello() + hdr(READ_REQ, 0, 0, RKEY, 128, VBASE) + \
        hdr(READ_REQ, 1, 0, RKEY, REGION, VBASE)
    s['read_req_past_end'] = c0 + hello() + hdr(READ_REQ, 0, 0, RKEY, 2, VBASE + REGION - 1)
    s['read_req_too_long'] = c0 + hello() + hdr(READ_REQ, 0, 0, RKEY, MAXP + 1, VBASE)
    s['read_req_with_len'] = c0 + hello() + hdr(READ_REQ, 0, 4, RKEY, 4, VBASE) + b'abcd'
    s['read_req_no_right'] = cfg(flags=F_RW) + hello() + hdr(READ_REQ, 0, 0, RKEY, 4, VBASE)
    cread = cfg(ops=(OP_SEND, OP_READ, OP_WRITE, OP_READ), rlen=(0, 32, 0, 0), off=7)
    s['read_resp'] = cread + hello() + hdr(READ_RESP, 8, 32) + b'R' * 32 + hdr(READ_RESP, 10, 0)
    s['read_resp_wrong_len'] = cread + hello() + hdr(READ_RESP, 8, 31) + b'R' * 31
    s['read_resp_for_write'] = cread + hello() + hdr(READ_RESP, 9, 0)
    s['read_resp_twice'] = cread + hello() + hdr(READ_RESP, 8, 32) + b'R' * 32 + \
        hdr(READ_RESP, 8, 32) + b'R' * 32
    s['read_resp_unsent'] = cread + hello() + hdr(READ_RESP, 11, 0)
    s['read_resp_done'] = cfg(ops=(OP_READ, OP_READ), ndone=1, rlen=(8, 8)) + hello() + \
        hdr(READ_RESP, 0, 8) + b'r' * 8
    cack = cfg(ops=(OP_WRITE, OP_WRITE, OP_SEND), off=100)
    s['ack'] = cack + hello() + hdr(ACK, 101) + hdr(ACK, 102) + hdr(ACK, 50)
    s['ack_future'] = cack + hello() + hdr(ACK, 103)
    s['ack_with_len'] = cack + hello() + hdr(ACK, 101, 4) + b'abcd'
    s['ack_wrap'] = cfg(ops=(OP_WRITE,) * 4, off=0xFFFFFFFE) + hello() + \
        hdr(ACK, 0xFFFFFFFF) + hdr(ACK, 1) + hdr(ACK, 2)
    s['nak'] = cack + hello() + hdr(NAK, 101, rlen=0x10004)
    s['nak_with_len'] = cack + hello() + hdr(NAK, 101, 4) + b'abcd'
    s['nak_unknown'] = cack + hello() + hdr(NAK, 7)
    s['after_hello_cfg'] = cfg(flags=F_HELLO | F_RW | F_RR, recvs=(64,)) + hdr(SEND, 0, 8) + b'x' * 8
    s['mixed'] = cfg(ops=(OP_WRITE, OP_READ, OP_SEND), rlen=(0, 16), recvs=(32, 32)) + hello() + \
        hdr(SEND, 0, 32) + b'a' * 32 + hdr(WRITE, 1, 16, RKEY, raddr=VBASE + 16) + b'b' * 16 + \
        hdr(READ_REQ, 2, 0, RKEY, 64, VBASE) + hdr(ACK, 0) + hdr(READ_RESP, 1, 16) + b'c' * 16 + \
        hdr(SEND, 3, 8) + b'd' * 8 + hdr(SEND, 4, 8) + b'e' * 8 + hdr(NAK, 2, rlen=0x10004)
    s['short_cfg'] = b'\x07\x01'
    s.update(tcp_ext_seeds())
    return s


def u64(*v):
    return struct.pack('<%dQ' % len(v), *v)


def tcp_ext_seeds():
    """The IB extension frames: WRITE_IMM, FETCH_ADD, CMP_SWAP, ATOMIC_RESP."""
    s = {}
    c0, cr = cfg(), cfg(recvs=(16, 16))
    s['write_imm'] = cr + hello() + hdr(WRITE_IMM, 0, 64, RKEY, 0x1111, VBASE + 64) + b'I' * 64
    s['write_imm_zero'] = cr + hello() + hdr(WRITE_IMM, 0, 0, RKEY, 0x7777, VBASE)
    s['write_imm_no_recv'] = c0 + hello() + hdr(WRITE_IMM, 0, 8, RKEY, 1, VBASE) + b'i' * 8 + \
        hdr(SEND, 1, 4) + b'abcd' + hdr(WRITE_IMM, 2, 8, RKEY, 2, VBASE + 8) + b'j' * 8
    s['write_imm_after_eager'] = cfg(recvs=(16,)) + hello() + hdr(SEND, 0, 4) + b'abcd' + \
        hdr(WRITE_IMM, 1, 4, RKEY, 3, VBASE) + b'wxyz'
    s['write_imm_no_right'] = cfg(flags=F_RR | F_RA, recvs=(16,)) + hello() + \
        hdr(WRITE_IMM, 0, 4, RKEY, 9, VBASE) + b'abcd'
    s['write_imm_past_end'] = cr + hello() + hdr(WRITE_IMM, 0, 8, RKEY, 9, VBASE + REGION - 4) + b'p' * 8
    s['write_imm_bad_rkey'] = cr + hello() + hdr(WRITE_IMM, 0, 4, RKEY ^ 0x10, 9, VBASE) + b'abcd'
    s['write_imm_seq_wrong'] = cr + hello() + hdr(WRITE_IMM, 3, 4, RKEY, 9, VBASE) + b'abcd'
    s['write_imm_truncated'] = cr + hello() + hdr(WRITE_IMM, 0, 64, RKEY, 9, VBASE) + b't' * 20
    s['fetch_add'] = c0 + hello() + hdr(FETCH_ADD, 0, 8, RKEY, raddr=VBASE + 8) + u64(5) + \
        hdr(FETCH_ADD, 1, 8, RKEY, raddr=VBASE + 8) + u64((1 << 64) - 1)
    s['cmp_swap'] = c0 + hello() + hdr(CMP_SWAP, 0, 16, RKEY, raddr=VBASE) + u64(0, 0x12345) + \
        hdr(CMP_SWAP, 1, 16, RKEY, raddr=VBASE) + u64(0, 7)
    s['atomic_last_word'] = c0 + hello() + hdr(FETCH_ADD, 0, 8, RKEY, raddr=VBASE + REGION - 8) + u64(1)
    s['atomic_past_end'] = c0 + hello() + hdr(FETCH_ADD, 0, 8, RKEY, raddr=VBASE + REGION) + u64(1)
    s['atomic_below'] = c0 + hello() + hdr(CMP_SWAP, 0, 16, RKEY, raddr=VBASE - 8) + u64(0, 1)
    s['atomic_wrap'] = c0 + hello() + hdr(FETCH_ADD, 0, 8, RKEY, raddr=(1 << 64) - 8) + u64(1)
    s['atomic_misaligned'] = c0 + hello() + hdr(FETCH_ADD, 0, 8, RKEY, raddr=VBASE + 4) + u64(1)
    s['atomic_misaligned_cs'] = c0 + hello() + hdr(CMP_SWAP, 0, 16, RKEY, raddr=VBASE + 1) + u64(0, 1)
    s['fetch_add_len_16'] = c0 + hello() + hdr(FETCH_ADD, 0, 16, RKEY, raddr=VBASE) + u64(1, 2)
    s['fetch_add_len_0'] = c0 + hello() + hdr(FETCH_ADD, 0, 0, RKEY, raddr=VBASE)
    s['cmp_swap_len_8'] = c0 + hello() + hdr(CMP_SWAP, 0, 8, RKEY, raddr=VBASE) + u64(1)
    s['atomic_huge'] = c0 + hello() + hdr(CMP_SWAP, 0, MAXP, RKEY, raddr=VBASE)
    s['atomic_no_right'] = cfg(flags=F_RW | F_RR) + hello() + hdr(FETCH_ADD, 0, 8, RKEY, raddr=VBASE) + u64(1)
    s['atomic_bad_rkey'] = c0 + hello() + hdr(FETCH_ADD, 0, 8, RKEY + 1, raddr=VBASE) + u64(1)
    s['atomic_truncated'] = c0 + hello() + hdr(CMP_SWAP, 0, 16, RKEY, raddr=VBASE) + u64(1)[:5]
    s['atomic_seq_wrong'] = c0 + hello() + hdr(FETCH_ADD, 9, 8, RKEY, raddr=VBASE) + u64(1)
    s['atomics_past_resp_depth'] = c0 + hello() + b''.join(
        hdr(FETCH_ADD, i, 8, RKEY, raddr=VBASE) + u64(1) for i in range(70))
    catom = cfg(ops=(OP_SEND, OP_ATOMIC, OP_WRITE, OP_ATOMIC), off=7)
    s['atomic_resp'] = catom + hello() + hdr(ATOMIC_RESP, 8, token=0x12345) + \
        hdr(ACK, 9) + hdr(ATOMIC_RESP, 10, token=(1 << 64) - 1)
    s['atomic_resp_with_len'] = catom + hello() + hdr(ATOMIC_RESP, 8, 8, token=1) + u64(1)
    s['atomic_resp_for_write'] = catom + hello() + hdr(ATOMIC_RESP, 9, token=1)
    s['atomic_resp_for_send'] = catom + hello() + hdr(ATOMIC_RESP, 7, token=1)
    s['atomic_resp_twice'] = catom + hello() + hdr(ATOMIC_RESP, 8, token=1) + hdr(ATOMIC_RESP, 8, token=2)
    s['atomic_resp_unsent'] = catom + hello() + hdr(ATOMIC_RESP, 11, token=1)
    s['atomic_resp_for_read'] = cfg(ops=(OP_READ,), rlen=(8,)) + hello() + hdr(ATOMIC_RESP, 0, token=1)
    s['read_resp_for_atomic'] = catom + hello() + hdr(READ_RESP, 8, 8) + u64(1)
    s['mixed_ext'] = cfg(ops=(OP_ATOMIC, OP_WRITE, OP_READ), rlen=(0, 0, 8), recvs=(16, 16)) + hello() + \
        hdr(WRITE_IMM, 0, 16, RKEY, 0xABCD, VBASE + 32) + b'm' * 16 + \
        hdr(FETCH_ADD, 1, 8, RKEY, raddr=VBASE + 32) + u64(3) + hdr(ATOMIC_RESP, 0, token=9) + \
        hdr(SEND, 2, 8) + b'n' * 8 + hdr(CMP_SWAP, 3, 16, RKEY, raddr=VBASE + 40) + u64(0, 4) + \
        hdr(ACK, 1) + hdr(READ_RESP, 2, 8) + b'o' * 8 + hdr(WRITE_IMM, 4, 0, RKEY, 1, VBASE) + \
        hdr(FETCH_ADD, 5, 8, RKEY, raddr=VBASE + 4) + u64(1)
    return s


# ---- cm: chunk byte + frames -------------------------------------------
CM_MAGIC, CM_VERSION = 0x5A44434D, 1
REQ, REP, RTU, REJ, DISC, DISC_ACK = range(1, 7)


def cm(typ, pdata=b'', blob=b'', reason=0, qual=0, magic=CM_MAGIC, version=CM_VERSION,
       plen=None, blen=None):
    plen = len(pdata) if plen is None else plen
    blen = len(blob) if blen is None else blen
    return struct.pack('>IBBHHHI', magic, version, typ, reason, plen, blen, qual) + pdata + blob


def tcp_blob():
    return struct.pack('<IHHIIQ', 0x424F4C42, 1, 0x3930, 0x0100007F, 0, 0x0102030405060708)


def cm_seeds():
    s = {}
    whole, byte, seven = b'\x00', b'\x01', b'\x07'
    req = cm(REQ, b'hello pdata 0123', tcp_blob(), qual=1234)
    s['req'] = whole + req
    s['req_bytewise'] = byte + req
    s['rep'] = whole + cm(REP, b'', tcp_blob())
    s['rep_pdata'] = seven + cm(REP, b'P' * 64, tcp_blob())
    s['rtu'] = whole + cm(RTU)
    s['rej_peer'] = whole + cm(REJ, b'no thanks', reason=1)
    s['rej_non_peer'] = whole + cm(REJ, reason=2)
    s['disc'] = whole + cm(DISC)
    s['disc_ack'] = whole + cm(DISC_ACK)
    s['req_max'] = b'\x40' + cm(REQ, b'p' * 512, b'b' * 512, qual=0xFFFFFFFF)
    s['req_pdata_513'] = whole + cm(REQ, b'p' * 513)
    s['req_blob_513'] = whole + cm(REQ, b'', b'b' * 513)
    s['req_len_65535'] = whole + cm(REQ, plen=0xFFFF, blen=0xFFFF)
    s['bad_magic'] = whole + cm(REQ, magic=0x5A44434E)
    s['bad_version'] = whole + cm(REQ, version=2)
    s['type_0'] = whole + cm(0)
    s['type_7'] = whole + cm(7)
    s['rtu_reason'] = whole + cm(RTU, reason=1)
    s['rtu_pdata'] = whole + cm(RTU, b'x')
    s['rej_blob'] = whole + cm(REJ, b'', b'b', reason=1)
    s['rej_reason_0'] = whole + cm(REJ)
    s['rej_reason_3'] = whole + cm(REJ, reason=3)
    s['req_reason'] = whole + cm(REQ, reason=1)
    s['disc_blob'] = whole + cm(DISC, blob=b'b')
    s['truncated_header'] = whole + req[:10]
    s['truncated_body'] = seven + req[:30]
    s['session_active'] = byte + cm(REQ, b'abc', tcp_blob()) + cm(RTU) + cm(DISC) + cm(DISC_ACK)
    s['session_passive'] = seven + cm(REP, b'ok', tcp_blob()) + cm(DISC_ACK)
    s['good_then_bad'] = whole + cm(RTU) + cm(REQ, magic=0)
    s['empty'] = whole
    return s


# ---- tcp UD: a selector byte, then a blob, or a receive size and a datagram
UD_MAGIC, UD_BLOB_MAGIC, UD_VERSION, UD_OP = 0x4455445A, 0x4C424455, 1, 1
UD_QPN, UD_KEY = 7, 0x1122334455667788


def ud_blob(magic=UD_BLOB_MAGIC, version=UD_VERSION, port=0x3412, addr=0x0100007F, qpn=3, key=9):
    # port and addr in network order, as the device writes them
    return struct.pack('<IHHIIQ', magic, version, port, addr, qpn, key)


def ud_dgram(payload=b'', ln=None, qpn=UD_QPN, key=UD_KEY, magic=UD_MAGIC, version=UD_VERSION,
             op=UD_OP, reserved=0):
    ln = len(payload) if ln is None else ln
    return struct.pack('<IBBHIIQ', magic, version, op, reserved, qpn, ln, key) + payload


def ud_seeds():
    s = {}
    s['blob'] = b'\0' + ud_blob()
    s['blob_short'] = b'\0' + ud_blob()[:-1]
    s['blob_long'] = b'\0' + ud_blob() + b'x'
    s['blob_bad_magic'] = b'\0' + ud_blob(magic=UD_MAGIC)
    s['blob_bad_version'] = b'\0' + ud_blob(version=2)
    s['blob_port0'] = b'\0' + ud_blob(port=0)
    s['blob_addr0'] = b'\0' + ud_blob(addr=0)
    s['blob_empty'] = b'\0'
    fit = bytes([(40 + 64) // 4])
    s['dgram'] = b'\1' + fit + ud_dgram(b'D' * 64)
    s['dgram_empty'] = b'\1' + bytes([10]) + ud_dgram()
    s['dgram_too_big'] = b'\1' + fit + ud_dgram(b'D' * 65)
    s['dgram_small_recv'] = b'\1' + bytes([9]) + ud_dgram(b'd')
    s['dgram_short'] = b'\1' + fit + ud_dgram(b'D' * 8)[:20]
    s['dgram_len_lies'] = b'\1' + fit + ud_dgram(b'D' * 8, ln=9)
    s['dgram_len_huge'] = b'\1' + fit + ud_dgram(b'D' * 8, ln=0xFFFFFFFF)
    s['dgram_other_qp'] = b'\1' + fit + ud_dgram(b'D' * 8, qpn=8)
    s['dgram_wrong_key'] = b'\1' + fit + ud_dgram(b'D' * 8, key=UD_KEY ^ 1)
    s['dgram_bad_magic'] = b'\1' + fit + ud_dgram(b'D', magic=0)
    s['dgram_bad_version'] = b'\1' + fit + ud_dgram(b'D', version=0)
    s['dgram_bad_op'] = b'\1' + fit + ud_dgram(b'D', op=2)
    s['dgram_reserved'] = b'\1' + fit + ud_dgram(b'D', reserved=1)
    return s


def write(sub, seeds):
    d = os.path.join(HERE, 'corpus', sub)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    for name, data in seeds.items():
        with open(os.path.join(d, name), 'wb') as f:
            f.write(data)
    print(f'{d}: {len(seeds)} seeds', file=sys.stderr)


if __name__ == '__main__':
    # arguments: the harnesses to write (default: all)
    which = sys.argv[1:] or ['fuzz_tcp_frame', 'fuzz_cm_frame', 'fuzz_tcp_ud']
    seeds = {'fuzz_tcp_frame': tcp_seeds, 'fuzz_cm_frame': cm_seeds, 'fuzz_tcp_ud': ud_seeds}
    for name in which:
        write(name, seeds[name]())
