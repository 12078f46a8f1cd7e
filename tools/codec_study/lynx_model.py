"""An approximate float model of the lynx a4r4 codec (docs/FORMAT.md) for design studies, not a codec.

It follows the format's steps (page-channel frame, chunk ends on a grid, the knee curve, conditional-mean anchor
tables from the first 64 channels, exact extremes) in numpy, with knobs the format does not have yet: `chunk`,
`grid` (points of the chunk-end grid: 4095 today, 179 for a 14-bit end pair), `exact_ends`, `tables_per`, and
`frame_spikes` (k values per page-channel kept exactly and left out of the frame and the chunk ranges, chosen by
`spike_rule`: 'median', the farthest from the channel median, or 'range', the k whose removal leaves the
narrowest range: version 4's rule), `warp` (a sinh-warped end grid), `super_chunk` / `sub_grid` (two-level chunk
ends) and `adaptive` (per channel, whichever of the flat and two-level ends gives the smaller squared widths). Checked against `kvtctl codec roundtrip --scheme lynx` on one SmolLM2 layer: 97% of full and
76% of anchor values identical, the rest within float rounding; NMSE equal to 3 digits. int4/int8 are exact.
docs/BENCHMARKS.md "Where a better anchor can come from" is what it was used for.
"""
import numpy as np
M=127
def curve(alpha,w,c):
    v0=lambda c: np.expm1(c/M*np.log1p(alpha))/alpha
    if w<=0: return v0(c)
    c0=(M+1)*7/8-0.5
    c=np.asarray(c,dtype=np.float64)
    return np.where(c<=c0,(1-w)*v0(c)/v0(c0),1-w+w*(c-c0)/(M-c0))
def tables(alpha=0.1,w=0.11):
    t=curve(alpha,w,np.arange(1,M+1)-0.5).astype(np.float32)  # t_1..t_M
    V=curve(alpha,w,np.arange(0,M+1)).astype(np.float32); V[0]=0
    return t,V

def f16_down(x):
    h=x.astype(np.float16); h=np.where(h.astype(np.float32)>x, np.nextafter(h,np.float16(-np.inf)),h); return h.astype(np.float32)
def f16_up(x):
    h=x.astype(np.float16); h=np.where(h.astype(np.float32)<x, np.nextafter(h,np.float16(np.inf)),h); return h.astype(np.float32)

def intq(X,bits,chunk=32):
    T,C=X.shape; n=T//chunk*chunk; out=X.copy()
    Y=X[:n].reshape(-1,chunk,C); Q=2**bits-1
    m=f16_down(Y.min(1)); s=f16_up((Y.max(1)-m)/Q)
    q=np.where(s[:,None]>0,np.clip(np.rint((Y-m[:,None])/np.where(s>0,s,1)[:,None]),0,Q),0)
    out[:n]=(m[:,None]+q*s[:,None]).reshape(n,C)
    if n<T: out[n:]=intq(X[n:],bits,T-n) if T-n>0 else X[n:]
    return out

def quant_ends(cmin,cmax,lo,hi,grid,warp=0.0):
    """Outward-rounded ends of [cmin, cmax] on a grid of `grid` points over [lo, hi] (elementwise arrays)."""
    lo=np.broadcast_to(lo,cmin.shape).astype(np.float32); hi=np.broadcast_to(hi,cmin.shape).astype(np.float32)
    centre=((lo.astype(np.float64)+hi)*0.5).astype(np.float32); half=((hi.astype(np.float64)-lo)*0.5).astype(np.float32)
    G=grid-1; mid=G//2
    u=(np.arange(grid)-mid)/mid
    g=(np.sinh(warp*u)/np.sinh(warp) if warp>0 else u).astype(np.float32)
    def end(q):
        e=np.clip(centre+half*g[q],lo,hi)
        e=np.where(q==0,lo,e); e=np.where(q==G,hi,e); return e
    hs=np.where(half>0,half,1)
    ql=np.clip(np.searchsorted(g,((cmin-centre)/hs).ravel(),side='right').reshape(cmin.shape)-1,0,G)
    for _ in range(3):
        ql=np.where(end(ql)>cmin,ql-1,ql); ql=np.clip(ql,0,G)
        ql=np.where((ql<G)&(end(np.minimum(ql+1,G))<=cmin),ql+1,ql)
    qh=np.clip(np.searchsorted(g,((cmax-centre)/hs).ravel(),side='left').reshape(cmax.shape),0,G)
    for _ in range(3):
        qh=np.where(end(qh)<cmax,qh+1,qh); qh=np.clip(qh,0,G)
        qh=np.where((qh>0)&(end(np.maximum(qh-1,0))>=cmax),qh-1,qh)
    qh=np.maximum(qh,ql)
    return np.where(half>0,end(ql),lo), np.where(half>0,end(qh),lo)

def lynx(X,page=1024,chunk=32,alpha=0.1,w=0.11,grid=4095,exact_ends=False,sample_ch=64,tables_per=None,
         stage='both',extremes=True,centre_rule='midrange',frame_spikes=0,warp=0.0,spike_rule='median',super_chunk=0,sub_grid=21,adaptive=False):
    """Approximate lynx a4r4 roundtrip of X [T,C] -> (anchor, full). tables_per: None=page (first sample_ch channels), int=per group of channels"""
    T,C=X.shape; A=np.empty_like(X); F=np.empty_like(X)
    t,V=tables(alpha,w)
    for p0 in range(0,T,page):
        P0=X[p0:p0+page]; pt=P0.shape[0]; P=P0.copy()
        if frame_spikes:
            k=frame_spikes
            if spike_rule=='median':
                dev=np.abs(P-np.median(P,0)); idx=np.argsort(-dev,0)[:k]
            else:  # 'range': the k values (i lowest, k - i highest) whose removal leaves the narrowest frame
                order=np.argsort(P,0,kind='stable'); S=np.take_along_axis(P,order,0).astype(np.float64); n=P.shape[0]
                r=np.stack([S[n-1-(k-i)]-S[i] for i in range(k+1)]); best=np.argmin(r,0)
                idx=np.stack([np.where(j<best,order[j],order[n-k+j]) for j in range(k)])
            ex=np.zeros(P.shape,bool); np.put_along_axis(ex,idx,True,0)
            # each spike is replaced by the first non-spike value of its chunk-channel (the codec's rule)
            cl_=min(chunk,pt)
            for c in np.nonzero(ex.any(0))[0]:
                for tt in np.nonzero(ex[:,c])[0]:
                    c0_=tt//cl_*cl_; seg=np.arange(c0_,min(c0_+cl_,pt)); ok=seg[~ex[seg,c]]
                    P[tt,c]=P[ok[0],c] if len(ok) else P[tt,c]
        cl=min(chunk,pt); nc=pt//cl; n=nc*cl
        segs=[(P[:n],cl)]+([(P[n:],pt-n)] if n<pt else [])
        outA=[];outF=[]
        lo=P.min(0).astype(np.float64); hi=P.max(0).astype(np.float64)
        for S,cl2 in segs:
            Y=S.reshape(-1,cl2,C).astype(np.float32)
            cmin=Y.min(1); cmax=Y.max(1)
            if exact_ends:
                a=cmin; b=cmax
            elif super_chunk and adaptive:
                # per channel, the flat grid or the two-level ends, whichever gives the smaller sum of squared widths
                fa,fb=quant_ends(cmin,cmax,lo.astype(np.float32),hi.astype(np.float32),grid,warp)
                ns=super_chunk//cl2 if cl2<super_chunk else 1
                SA=np.empty_like(cmin); SB=np.empty_like(cmax)
                for j in range(-(-Y.shape[0]//ns)):
                    sl=slice(j*ns,min((j+1)*ns,Y.shape[0]))
                    sa,sb=quant_ends(cmin[sl].min(0),cmax[sl].max(0),lo.astype(np.float32),hi.astype(np.float32),4095,0.0)
                    SA[sl]=sa; SB[sl]=sb
                ta,tb=quant_ends(cmin,cmax,SA,SB,sub_grid,0.0)
                use2=((tb.astype(np.float64)-ta)**2).sum(0)<((fb.astype(np.float64)-fa)**2).sum(0)
                a=np.where(use2[None,:],ta,fa); b=np.where(use2[None,:],tb,fb)
            elif super_chunk:
                # two levels: super-chunk ends on the frame's `grid`, then each chunk's ends on `sub_grid` points
                # over its super-chunk's interval
                ns=super_chunk//cl2 if cl2<super_chunk else 1
                nsc=-(-Y.shape[0]//ns)
                SA=np.empty_like(cmin); SB=np.empty_like(cmax)
                for j in range(nsc):
                    sl=slice(j*ns,min((j+1)*ns,Y.shape[0]))
                    sa,sb=quant_ends(cmin[sl].min(0),cmax[sl].max(0),lo.astype(np.float32),hi.astype(np.float32),grid,warp)
                    SA[sl]=sa; SB[sl]=sb
                a,b=quant_ends(cmin,cmax,SA,SB,sub_grid,0.0)
            else:
                a,b=quant_ends(cmin,cmax,lo.astype(np.float32),hi.astype(np.float32),grid,warp)
            mu=np.clip(0.5*a+0.5*b,a,b).astype(np.float32); sig=np.maximum(b-mu,mu-a).astype(np.float32)
            inv=np.where(sig>0,1/np.where(sig>0,sig,1),0).astype(np.float32)
            xf=np.clip((Y-mu[:,None])*inv[:,None],-1,1)
            neg=xf<0; I=np.searchsorted(t,np.abs(xf),side='right')
            vF=np.where(neg,-V[I],V[I])
            h=I>>4
            # singles: exactly one token in chunk-channel with top cell of its sign
            top=h==7
            singles=np.zeros_like(top)
            if extremes:
                for sgn in (False,True):
                    m_=top&(neg==sgn); cnt=m_.sum(1,keepdims=True); singles|=m_&(cnt==1)
            outF.append((mu[:,None]+sig[:,None]*vF, lo, hi))
            outA.append((mu,sig,I,h,neg,singles,Y.shape))
        # tables from page sample
        def table_from(sel_I):
            cnt=np.bincount(sel_I,minlength=M+1).astype(np.float64)
            tab=np.zeros(8)
            for hh in range(8):
                c=cnt[hh*16:(hh+1)*16]; nn=c.sum()
                tab[hh]=(c*V[hh*16:(hh+1)*16]).sum()/nn if nn>0 else curve(alpha,w,hh*16+7.5)
            return tab.astype(np.float32)
        tok=np.arange(pt)
        def gather(ch_sel):
            Is=[]
            off=0
            for (mu,sig,I,h,neg,singles,sh) in outA:
                nt=sh[0]*sh[1]
                II=I.reshape(nt,C); ss=singles.reshape(nt,C)
                tt=tok[off:off+nt]; off+=nt
                rows=(tt%4==0)
                sub=II[rows][:,ch_sel]; sx=ss[rows][:,ch_sel]
                Is.append(sub[~sx])
            return np.concatenate(Is)
        if tables_per is None:
            tabs=np.tile(table_from(gather(np.arange(min(C,sample_ch)))),(C,1))
        else:
            tabs=np.concatenate([np.tile(table_from(gather(np.arange(g,min(C,g+tables_per)))),(min(C,g+tables_per)-g,1)) for g in range(0,C,tables_per)])
        ra=[];rf=[]
        for (mu,sig,I,h,neg,singles,sh),(xF,_,_) in zip(outA,outF):
            mag=np.take_along_axis(np.broadcast_to(tabs[None,None],(sh[0],sh[1],C,8)),h[...,None],3)[...,0]
            mag=np.where(singles,1.0,mag)
            vA=np.where(neg,-mag,mag)
            xa=mu[:,None]+sig[:,None]*vA
            ra.append(np.clip(xa,lo.astype(np.float32),hi.astype(np.float32)).reshape(-1,C))
            rf.append(np.clip(xF,lo.astype(np.float32),hi.astype(np.float32)).reshape(-1,C))
        A[p0:p0+pt]=np.concatenate(ra); F[p0:p0+pt]=np.concatenate(rf)
        if frame_spikes:
            A[p0:p0+pt]=np.where(ex,P0,A[p0:p0+pt]); F[p0:p0+pt]=np.where(ex,P0,F[p0:p0+pt])
    return A,F

def make_queries(K,nq_per_head=8,group=3,seed=0):
    # K: [T,H,D] one layer -> Q [H*group, nq, D]
    rng=np.random.default_rng(seed); T,H,D=K.shape; Qs=[]
    for h in range(H):
        Kh=K[:,h].astype(np.float64); km=Kh.mean(0)
        for g in range(group):
            qq=[]
            for _ in range(nq_per_head):
                n=rng.integers(1,4); idx=rng.integers(0,T,n)
                if rng.random()<0.3: idx[0]=0
                d=(Kh[idx]-km).mean(0)+0.5*km/ (np.linalg.norm(km)+1e-9)*np.linalg.norm(Kh[idx]-km,axis=1).mean()
                d=d+rng.normal(size=D)*np.linalg.norm(d)/np.sqrt(D)*0.5
                marg=rng.uniform(5,12)
                gap=((Kh[idx]-km)@d).mean()/np.sqrt(D)
                qq.append(d*marg/max(gap,1e-9))
            Qs.append(np.array(qq))
    return Qs

def vnmse(K,V,Kh,Vh,Qs,group=3):
    T,H,D=K.shape; errs=[]
    for hq,Q in enumerate(Qs):
        h=hq//group
        def att(KK,VV):
            L=Q@KK[:,h].astype(np.float64).T/np.sqrt(D); L-=L.max(1,keepdims=True); P=np.exp(L); P/=P.sum(1,keepdims=True)
            return P@VV[:,h].astype(np.float64)
        o=att(K,V); oh=att(Kh,Vh)
        errs.append((np.sum((o-oh)**2,1)/np.sum(o**2,1)))
    return float(np.mean(np.concatenate(errs)))
