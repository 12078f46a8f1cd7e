"""Attention vNMSE of lynx variants against int4/int8 on KV dumps, layer by layer (lynx_model.py).

    PAGE=2048 NQ=16 python3 study.py '{"today": {}, "c16": {"chunk": 16, "grid": 179}}' kv.npy [more.npy ...]

Prints per variant: mean and worst layer of anchor/int4 and full/int8 attention vNMSE, and the K NMSE ratios.
Queries as in lynx_model.make_queries (aimed at 1-3 keys, 30% at token 0, margins 5-12), NQ per query head.
"""
import json
import os
import sys

import numpy as np

import lynx_model as m
from concurrent.futures import ProcessPoolExecutor
NQ=int(os.environ.get("NQ","32")); page=int(os.environ.get("PAGE","1024"))
files=sys.argv[2:]; variants=json.loads(sys.argv[1])
def run(args):
    f,l=args; x=np.load(f,mmap_mode='r'); L,_,T,H,D=x.shape
    K3=np.array(x[l,0]); V3=np.array(x[l,1]); K=K3.reshape(T,-1); V=V3.reshape(T,-1)
    Qs=m.make_queries(K3,nq_per_head=NQ,seed=l)
    sh=lambda A: A.reshape(T,H,D)
    nm=lambda a,b: float(np.sum((a-b)**2)/np.sum(b**2))
    k4=m.intq(K,4); v4=m.intq(V,4); k8=m.intq(K,8); v8=m.intq(V,8)
    r={'int4':m.vnmse(K3,V3,sh(k4),sh(v4),Qs),'int8':m.vnmse(K3,V3,sh(k8),sh(v8),Qs),'int4_knmse':nm(k4,K),'int8_knmse':nm(k8,K)}
    for name,kw in variants.items():
        ka,kf=m.lynx(K,page=page,**kw); va,vf=m.lynx(V,page=page,**kw)
        r[name]=(m.vnmse(K3,V3,sh(ka),sh(va),Qs),m.vnmse(K3,V3,sh(kf),sh(vf),Qs),nm(ka,K),nm(kf,K))
    return r
LAY=os.environ.get("LAYERS"); jobs=[(f,l) for f in files for l in (range(np.load(f,mmap_mode="r").shape[0]) if not LAY else [int(v) for v in LAY.split(",")])]
with ProcessPoolExecutor(int(os.environ.get("PROCS","2"))) as ex: res=list(ex.map(run,jobs))
print('%-28s %8s %8s %8s %8s %8s %8s'%('variant','A/int4','maxA','F/int8','maxF','A knmse','F knmse'))
for name in variants:
    a=np.array([r[name][0]/r['int4'] for r in res]); f=np.array([r[name][1]/r['int8'] for r in res])
    ak=np.array([r[name][2]/r['int4_knmse'] for r in res]); fk=np.array([r[name][3]/r['int8_knmse'] for r in res])
    print('%-28s %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f'%(name,a.mean(),a.max(),f.mean(),f.max(),ak.mean(),fk.mean()))
