"""Held-out test KV with the features issue 35 names (Student-t bulk, log-normal channel scales, K outlier
channels x15-80, per-channel K offsets before RoPE, 3 sink tokens x4-12), one file per variant that removes one
feature: `python3 heldout_kv.py` writes ho_<variant>.npy [4, 2, 1024, 8, 128] in the current directory."""

import numpy as np
def gen(seed=0,T=1024,H=8,D=128,L=4,sinks=True,offsets=True,outliers=True,bulk='t'):
    rng=np.random.default_rng(seed); out=np.zeros((L,2,T,H,D),np.float32)
    pos=np.arange(T)[:,None]; inv=10000.0**(-np.arange(D//2)*2/D)
    for l in range(L):
        for kv in (0,1):
            if bulk=='t': X=rng.standard_t(4,size=(T,H,D))
            else: X=rng.laplace(size=(T,H,D))
            X*=np.exp(rng.normal(0,0.5,size=(1,H,D)))
            if kv==0:
                if offsets: X+=rng.normal(0,2.0,size=(1,H,D))
                if outliers:
                    for h in range(H):
                        for c in rng.choice(D//2,2,replace=False)[:,None]+np.array([[0,D//2]]):
                            X[:,h,c.ravel()]*=rng.uniform(15,80)
                ang=pos*inv[None,:]; c_,s_=np.cos(ang)[:,None,:],np.sin(ang)[:,None,:]
                a,b=X[...,:D//2].copy(),X[...,D//2:].copy()
                X[...,:D//2]=a*c_-b*s_; X[...,D//2:]=a*s_+b*c_
            if sinks:
                for t in [0]+list(rng.choice(np.arange(1,T),2,replace=False)):
                    X[t]*=rng.uniform(4,12)
            out[l,kv]=X.astype(np.float32)
    return out
if __name__=='__main__':
    cfgs={'all':{},'nosinks':{'sinks':False},'nooffsets':{'offsets':False},'nooutliers':{'outliers':False},'laplace':{'bulk':'l'},
          'none':{'sinks':False,'offsets':False,'outliers':False,'bulk':'l'}}
    for n,kw in cfgs.items(): np.save(f'ho_{n}.npy',gen(seed=7,**kw))
