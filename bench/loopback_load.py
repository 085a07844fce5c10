# A loopback TCP stream at a target rate for a given time: the CPU a network layer spends moving
# data, with no disk I/O (to measure what it costs a disk on the same machine).
# usage: python3 bench/loopback_load.py RATE_MB_PER_S SECONDS
import socket, threading, time, sys
rate=float(sys.argv[1])*1e6; secs=float(sys.argv[2])
def server(ls):
    c,_=ls.accept(); buf=bytearray(4<<20); mv=memoryview(buf)
    while c.recv_into(mv): pass
ls=socket.socket(); ls.bind(('127.0.0.1',0)); ls.listen(); port=ls.getsockname()[1]
t=threading.Thread(target=server,args=(ls,)); t.start()
s=socket.create_connection(('127.0.0.1',port)); buf=b'x'*(4<<20)
t0=time.time(); n=0
while time.time()-t0<secs:
    s.sendall(buf); n+=1
    ahead = n*len(buf)/rate - (time.time()-t0)
    if ahead>0: time.sleep(ahead)
s.close(); t.join()
print("loopback MB/s: %.0f" % (n*len(buf)/(time.time()-t0)/1e6))
