import socket, sys, time, os
port=int(sys.argv[1]); pid=int(sys.argv[2]); nkeys=int(sys.argv[3]); vsize=int(sys.argv[4]); rounds=int(sys.argv[5])
s=socket.create_connection(('127.0.0.1',port))
for i in range(nkeys):
    s.sendall(b"set key:%06d 0 0 %d noreply\r\n" % (i, vsize) + b"v"*vsize + b"\r\n")
s.sendall(b"mn\r\n")
buf=b''
while not buf.endswith(b"MN\r\n"): buf+=s.recv(65536)
req=b"get "+b" ".join(b"key:%06d" % i for i in range(nkeys))+b"\r\n"
def cpu():
    t=open(f'/proc/{pid}/stat').read().split(')')[1].split()
    return (int(t[11])+int(t[12]))/os.sysconf('SC_CLK_TCK')
c0=cpu(); t0=time.time()
PIPE=8
for r in range(rounds//PIPE):
    s.sendall(req*PIPE)
    n=0; buf=b''
    while n<PIPE:
        d=s.recv(1<<20); buf+=d
        n=buf.count(b"END\r\n")
c1=cpu()
print(f"{nkeys} keys x {vsize} B: {(c1-c0)/rounds*1e6:.1f} us server CPU per multi-get, {(c1-c0)/rounds/nkeys*1e9:.0f} ns per key; wall {time.time()-t0:.2f}s")
