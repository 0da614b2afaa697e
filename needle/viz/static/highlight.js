// A tiny syntax highlighter for the texts needle shows: LLVM IR, CUDA C, the kernel
// (loop) IR and the graph dumps.  One regular expression per language, its
// alternatives named by the class they give (.hl-<class> in viz.css).
"use strict";
const Highlight = (() => {
  const words = (list) => "\\b(?:" + list.split(" ").join("|") + ")\\b";
  const NUMBER = "-?\\b(?:0x[0-9a-fA-F]+|\\d+(?:\\.\\d+)?(?:[eE][-+]?\\d+)?)\\b";
  const LANGUAGES = {
    llvm: [
      ["comment", ";[^\\n]*"],
      ["string", "c?\"(?:[^\"\\\\\\n]|\\\\.)*\""],
      ["variable", "%[-\\w$.]+|%\"[^\"\\n]*\""],
      ["global", "@[-\\w$.]+|@\"[^\"\\n]*\""],
      ["label", "^[-\\w$.]+:"],
      ["type", words("void i1 i8 i16 i32 i64 half float double ptr label x86_fp80") + "|<\\d+ x"],
      ["keyword", words("define declare internal private global constant ret br switch call tail load store " +
        "getelementptr inbounds alloca phi select icmp fcmp add sub mul sdiv udiv srem urem fadd fsub fmul fdiv " +
        "frem fneg and or xor shl lshr ashr sext zext trunc fpext fptrunc sitofp uitofp fptosi fptoui bitcast " +
        "ptrtoint inttoptr extractelement insertelement shufflevector to align noalias nocapture nsw nuw fast contract " +
        "reassoc attributes unreachable target datalayout triple slt sgt sle sge eq ne ult ugt ule uge olt ogt ole oge " +
        "oeq one ord uno true false zeroinitializer undef poison metadata alwaysinline nounwind")],
      ["number", NUMBER],
    ],
    cuda: [
      ["comment", "//[^\\n]*|/\\*[\\s\\S]*?\\*/"],
      ["label", "^\\s*#[^\\n]*"],
      ["string", "\"(?:[^\"\\\\\\n]|\\\\.)*\""],
      ["keyword", words("extern __global__ __device__ __shared__ __restrict__ __syncthreads __forceinline__ static " +
        "inline const return if else for while do break continue struct typedef sizeof")],
      ["type", words("void bool char int long unsigned short float double size_t int64_t uint64_t int32_t " +
        "uint32_t int8_t uint8_t half float4 float2")],
      ["variable", words("threadIdx blockIdx blockDim gridDim")],
      ["number", NUMBER + "[fFuUlL]*"],
    ],
    kir: [  // the kernel IR of needle.ir.dump(stage="kernels")
      ["comment", "\\([^()\\n]*(?:released|launched)[^\\n]*\\)"],
      ["keyword", words("kernel parallel for in vector unroll var let if else local shared barrier threads blocks")],
      ["type", words("float32 float64 int32 int64 uint8 bool") + "\\*?"],
      ["variable", "\\b(?:in|out|tmp|p)\\d+\\b"],
      ["global", "\\b(?:max|min|exp|log|tanh|sigmoid|sqrt|pow|abs|select|where)(?=\\()"],
      ["number", NUMBER],
    ],
    graph: [  // the graph dumps of needle.ir.dump (graph, fused, autograd)
      ["note", "<-[^\\n]*"],
      ["comment", "#[^\\n]*"],
      ["label", "^\\s*(?:kernel \\d+:[^\\n]*|note:[^\\n]*|return\\b)"],
      ["variable", "%\\d+"],
      ["type", "\\b(?:f32|f64|i32|i64|u8|bool)\\[[\\d,]*\\]"],
      ["keyword", "= \\w+|\\bparam\\b|\\bleaf\\b"],
      ["number", NUMBER],
    ],
  };
  const compiled = {};
  for (const [name, rules] of Object.entries(LANGUAGES)) {
    compiled[name] = {
      classes: rules.map((r) => r[0]),
      regex: new RegExp(rules.map((r) => "(" + r[1] + ")").join("|"), "gm"),
    };
  }
  const escape = (s) => s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));

  // HTML of `text` with the tokens of `language` in <span class="hl-...">.
  function html(text, language) {
    const lang = compiled[language];
    if (!lang) return escape(text);
    const out = [];
    let last = 0;
    lang.regex.lastIndex = 0;
    for (let m = lang.regex.exec(text); m !== null; m = lang.regex.exec(text)) {
      if (m[0].length === 0) { lang.regex.lastIndex++; continue; }
      const group = m.findIndex((g, i) => i > 0 && g !== undefined);
      out.push(escape(text.slice(last, m.index)));
      out.push('<span class="hl-' + lang.classes[group - 1] + '">' + escape(m[0]) + "</span>");
      last = m.index + m[0].length;
    }
    out.push(escape(text.slice(last)));
    return out.join("");
  }
  return { html, escape };
})();
