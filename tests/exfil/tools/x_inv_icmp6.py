#!/usr/bin/python3
"""x_inv_icmp6.py: hand-made ICMPv6 messages from a raw socket (EX-013).

Who runs it: the workload with CAP_NET_RAW (profile P1) in exfil cases
EX-013 and EX-013b. The kernel fills in the ICMPv6 checksum.

  x_inv_icmp6.py ns DST TARGET   one neighbour solicitation sent to the
      (routed) unicast DST, with a 64-byte EXFIL payload in an option
  x_inv_icmp6.py rs IFACE N      N router solicitations to ff02::2 on IFACE
Prints "sent N" and, for refused sends, "refused E".
"""
import socket
import sys


def main():
    s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, 255)
    sent = refused = 0
    if sys.argv[1] == "ns":
        dst, target = sys.argv[2], sys.argv[3]
        opt = bytes([14, 9]) + b"EXFIL-" + b"x" * 64  # nonce option, 72 bytes
        msg = bytes([135, 0, 0, 0, 0, 0, 0, 0]) + socket.inet_pton(
            socket.AF_INET6, target) + opt
        try:
            s.sendto(msg, (dst, 0))
            sent += 1
        except OSError as e:
            refused += 1
            print("refused", e.errno)
    else:
        ifi = socket.if_nametoindex(sys.argv[2])
        for _ in range(min(int(sys.argv[3]), 1000)):
            try:
                s.sendto(bytes([133, 0, 0, 0, 0, 0, 0, 0]), ("ff02::2", 0, 0, ifi))
                sent += 1
            except OSError:
                refused += 1
    print("sent %d refused %d" % (sent, refused))


if __name__ == "__main__":
    main()
