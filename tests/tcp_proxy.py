"""A TCP proxy in a thread, for connection resets: every client connection goes through it to a real
server, and :meth:`TcpProxy.reset` kills them all with an RST on both sides (what a broker-side
connection reset, a load balancer or a NAT timeout does), while the proxy keeps accepting new ones."""

import select
import socket
import struct
import threading
from typing import List, Tuple


def _rst(s: socket.socket) -> None:
    try:  # SO_LINGER 0: close() sends an RST, not a FIN
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    s.close()


class TcpProxy(threading.Thread):
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        super().__init__(daemon=True, name=f"tcp-proxy-{target_port}")
        self.target = (target_host, target_port)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.pairs: List[Tuple[socket.socket, socket.socket]] = []
        self.lock = threading.Lock()
        self.resets = 0
        self.accepted = 0
        self._halt = threading.Event()

    def run(self) -> None:
        self.server.settimeout(0.1)
        while not self._halt.is_set():
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _rst(client)
                continue
            with self.lock:
                self.pairs.append((client, upstream))
                self.accepted += 1
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peer = {a: b, b: a}
        try:
            while True:
                ready, _, _ = select.select([a, b], [], [], 0.5)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        raise ConnectionResetError
                    peer[s].sendall(data)
        except (OSError, ValueError):
            pass
        finally:
            with self.lock:
                if (a, b) in self.pairs:
                    self.pairs.remove((a, b))
            for s in (a, b):
                try:
                    _rst(s)
                except OSError:
                    pass

    def connections(self) -> int:
        with self.lock:
            return len(self.pairs)

    def reset(self) -> int:
        """RST every open connection (both the client's and the server's side); returns how many."""
        with self.lock:
            pairs, self.pairs = list(self.pairs), []
        for a, b in pairs:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        self.resets += len(pairs)
        return len(pairs)

    def stop(self) -> None:
        self._halt.set()
        self.reset()
        self.server.close()
        self.join(5)
