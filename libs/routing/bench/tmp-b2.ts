import { buildSnapshot, compilePolicy, createLiveTable, decide } from "../src/index.ts";
const FAM=["H100","MI300X","A100","L40S"];
const nodes = Array.from({length:256},(_,i)=>({id:`n${i}`,endpoint:"http://x:1",framework:"vllm" as const,accelerator_family:FAM[i%4]!,tier:1,models:["m"],max_concurrency:16,health_path:"/h",metrics_path:"/m",registered_at:i}));
const snapshot = buildSnapshot({nodes, costs:[{kind:"on_prem",family:"H100",usd_per_gpu_hour:2,gpus_per_node:1}]});
const live = createLiveTable(snapshot);
for (const n of nodes) { live.applyState({type:"node.state.v1",node_id:n.id,status:"Active",probe_pending:false,queue_depth:3,running:0,waiting:0,kv_cache_usage:null,health_score:90,consecutive_failures:0,last_error:null,checked_at:0,last_ok_at:0,free_memory_gib:null,last_inference_at:null,tokens_per_second:1000,latency_ewma_ms:null,ttft_ewma_ms:null,instance_id:null}); }
const pol = compilePolicy({name:"p",accelerator_preference:FAM.map((family,i)=>({family,priority:i})),latency_target_ms:4000,cost_priority:(process.env.MODE ?? "balanced") as "balanced",queue_on_saturation:false,max_queue_ms:0});
let sink=0; const N=Number(process.env.N ?? 300000); const t0=performance.now();
const random = process.env.NORANDOM ? undefined : Math.random;
for (let r=0;r<N;r++){ const d=decide(snapshot, live, {model:"m",tier:1, random}, pol, 1); if (d && d.ok) sink+=d.viable; else sink += (d as any); }
console.log(((performance.now()-t0)/N*1000).toFixed(2),"µs/decision", sink>0);
