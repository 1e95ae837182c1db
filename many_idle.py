import socket, sys, time, subprocess
port=int(sys.argv[1]); n=int(sys.argv[2])
socks=[]
for i in range(n):
    try: socks.append(socket.create_connection(("127.0.0.1", port), timeout=2))
    except OSError as e: print("connect", i, e); break
print("idle connections:", len(socks), flush=True)
time.sleep(1)
for k in range(2):
    t=time.time()
    r=subprocess.run(["curl","-s","-m","10","-o","/dev/null","-w","%{http_code}","http://127.0.0.1:%d/healthz"%port],capture_output=True,text=True)
    print(f"/healthz: {r.stdout} in {time.time()-t:.2f}s", flush=True)
