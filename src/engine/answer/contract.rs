//! Output contracts at the end of a looper: an answer in hand is checked, and a broken one is
//! sent back once to the model that wrote it with what is wrong; a forwarded final step carries
//! the contract's instruction in its system message and is checked in the response phase.

use crate::config::Model;
use crate::llm::chat::reply_text;
use crate::llm::contract::OutputContract;
use crate::llm::usage::usage_of;
use crate::llm::LlmClient;
use serde_json::{json, Map, Value};
use std::time::Duration;

/// How an answer fared against its output contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContractOutcome {
    /// It kept the contract as written.
    Kept,
    /// It broke the contract and one repair call mended it.
    Repaired,
    /// It broke the contract (and was not mended).
    Violated,
}

impl ContractOutcome {
    /// `kept` or `violated`, as a check without repair finds it.
    pub fn of_check<E>(checked: &Result<(), E>) -> Self {
        match checked {
            Ok(()) => Self::Kept,
            Err(_) => Self::Violated,
        }
    }

    /// The outcome's name in headers, metadata, records and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Self::Kept => "kept",
            Self::Repaired => "repaired",
            Self::Violated => "violated",
        }
    }
}

/// An answer after its check (and repair, when it needed one).
#[derive(Debug, Clone)]
pub struct Enforced {
    /// The chat completion to return: the original, or the repaired one when the repair kept
    /// the contract.
    pub body: Value,
    /// Kept, repaired or violated.
    pub outcome: ContractOutcome,
    /// What is still wrong, when violated.
    pub reason: Option<String>,
    /// Prompt and completion tokens of the repair call.
    pub usage: (u64, u64),
}

/// Checks `body` against `contract`; a broken answer is repaired once by `model`, continuing
/// `messages` (the conversation that produced it) with the answer and the repair request.
pub async fn enforce(
    client: &LlmClient,
    contract: &OutputContract,
    model: &Model,
    messages: &[Value],
    mut body: Value,
    max_tokens: u64,
    deadline: Duration,
) -> Enforced {
    let text = reply_text(&body).to_owned();
    let Err(reason) = contract.check(&text) else {
        return Enforced {
            body,
            outcome: ContractOutcome::Kept,
            reason: None,
            usage: (0, 0),
        };
    };
    let mut conversation = messages.to_vec();
    conversation.push(json!({"role": "assistant", "content": text}));
    conversation.push(json!({"role": "user", "content": contract.repair_request(&reason)}));
    let request = json!({
        "model": model.provider_model, "stream": false, "max_tokens": max_tokens,
        "messages": conversation,
    });
    let called = client
        .chat(&model.name, request.to_string().into_bytes(), 1, deadline)
        .await;
    let reply = match called {
        Ok(reply) => reply,
        Err(error) => {
            return Enforced {
                body,
                outcome: ContractOutcome::Violated,
                reason: Some(format!("{reason} (the repair call failed: {error})")),
                usage: (0, 0),
            }
        }
    };
    let usage = usage_of(&reply.body).counted();
    let repaired = reply_text(&reply.body).to_owned();
    match contract.check(&repaired) {
        Ok(()) => {
            // The repaired text in the answer's place; an answer without one (any JSON an
            // upstream sent) gives way to the repair call's whole reply.
            match body.pointer_mut("/choices/0/message") {
                Some(Value::Object(message)) => {
                    message.insert("content".to_owned(), json!(repaired));
                }
                _ => body = reply.body.clone(),
            }
            Enforced {
                body,
                outcome: ContractOutcome::Repaired,
                reason: None,
                usage,
            }
        }
        Err(still) => Enforced {
            body,
            outcome: ContractOutcome::Violated,
            reason: Some(still),
            usage,
        },
    }
}

/// Adds the contract's instruction to a request's system message (appended to a leading
/// system message, or a new one first).
pub fn instruct(object: &mut Map<String, Value>, contract: &OutputContract) {
    let instruction = contract.instruction();
    let Some(Value::Array(messages)) = object.get_mut("messages") else {
        return;
    };
    if let Some(first) = messages.first_mut() {
        if first["role"] == "system" {
            if let Some(text) = first["content"].as_str() {
                first["content"] = json!(format!("{text}\n\n{instruction}"));
                return;
            }
        }
    }
    messages.insert(0, json!({"role": "system", "content": instruction}));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_instruction_joins_a_leading_system_message_or_comes_first() {
        let contract = OutputContract::Code {
            language: Some("python".to_owned()),
        };
        let mut with_system = json!({"messages": [
            {"role": "system", "content": "Be brief."}, {"role": "user", "content": "sort"}]});
        instruct(
            with_system.as_object_mut().unwrap_or(&mut Map::new()),
            &contract,
        );
        let first = with_system["messages"][0]["content"]
            .as_str()
            .unwrap_or_default();
        assert!(first.starts_with("Be brief.\n\nGive the code"), "{first}");
        assert_eq!(with_system["messages"].as_array().map(Vec::len), Some(2));
        let mut bare = json!({"messages": [{"role": "user", "content": "sort"}]});
        instruct(bare.as_object_mut().unwrap_or(&mut Map::new()), &contract);
        assert_eq!(bare["messages"][0]["role"], "system");
        assert_eq!(bare["messages"][1]["content"], "sort");
    }
}
