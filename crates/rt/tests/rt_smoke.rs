use duality_rt::{block_on, spawn, yield_now};

#[test]
fn spawn_and_join() {
    let v = block_on(async {
        let h = spawn(async { 40 + 2 });
        h.await.unwrap()
    });
    assert_eq!(v, 42);
}

#[test]
fn many_yields() {
    let total = block_on(async {
        let mut hs = Vec::new();
        for i in 0..100u64 {
            hs.push(spawn(async move {
                for _ in 0..100 {
                    yield_now().await;
                }
                i
            }));
        }
        let mut s = 0;
        for h in hs {
            s += h.await.unwrap();
        }
        s
    });
    assert_eq!(total, 4950);
    assert_eq!(duality_rt::task::alive(), 0);
}
